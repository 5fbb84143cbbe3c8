"""`key=value` overrides reach one entry of a `gyms:` list by label, gym name or position."""

import pytest

from mua.config import load_recipe
from mua.config.recipe_loading import apply_overrides
from mua.config.recipes import TrainRecipe
from mua.errors import UsageError


def _raw():
    return {
        "gyms": [
            {"name": "guess", "label": "g", "weight": 1.0},
            {"name": "intention", "weight": 1.0},
        ]
    }


def test_entry_by_label_name_and_position():
    raw = apply_overrides(
        _raw(), ["gyms.g.weight=3", "gyms.intention.max_turns=4", "gyms.1.weight=0.5"], TrainRecipe
    )
    assert raw["gyms"][0] == {"name": "guess", "label": "g", "weight": 3}
    assert raw["gyms"][1] == {"name": "intention", "weight": 0.5, "max_turns": 4}


def test_a_key_inside_the_entry_is_checked():
    with pytest.raises(UsageError, match=r"unknown key 'weigth'.*did you mean gyms\.g\.weight"):
        apply_overrides(_raw(), ["gyms.g.weigth=2"], TrainRecipe)


def test_unknown_entry_names_the_choices():
    with pytest.raises(
        UsageError, match=r"no entry 'math' in gyms; name one of g, intention or a position 0\.\.1"
    ):
        apply_overrides(_raw(), ["gyms.math.weight=2"], TrainRecipe)


def test_the_list_itself_is_never_replaced_by_a_dict():
    with pytest.raises(UsageError, match="name a key inside the entry"):
        apply_overrides(_raw(), ["gyms.g=1"], TrainRecipe)
    with pytest.raises(UsageError, match="has no gyms: list"):
        apply_overrides({"gym": {"name": "guess"}}, ["gyms.0.weight=2"], TrainRecipe)


def test_kind_change_still_drops_the_other_arms_keys(capsys):
    raw = {"user": {"kind": "llm", "base_url": "http://x", "model": "m"}}
    apply_overrides(raw, ["user.kind=scripted"], TrainRecipe)
    assert raw["user"] == {"kind": "scripted"}
    assert "user.base_url" in capsys.readouterr().err


def test_shipped_multi_gym_recipe_takes_an_entry_override():
    recipe = load_recipe("recipes/multi_gym_quickstart.yaml", ["gyms.guess.weight=5"], "train")
    weights = {e.key: e.weight for e in recipe.gyms}
    assert weights["guess"] == 5
