"""`mua eval --gym NAME key=value`: the overrides apply to the gyms --gym picks (they take
effect, or are refused when they cannot), never silently to a section --gym then replaces."""

from __future__ import annotations

import pytest

from mua.cli.eval_cmd import build_recipe
from mua.errors import UsageError

FLAGS = dict(model="expert", user=None, n=None, max_tasks=None, temperature=None)


def test_a_gym_option_override_reaches_the_gym_named_by_flag():
    recipe, _ = build_recipe(["gym.options.data_dir=/data/tau2"], gyms=["tau2"], **FLAGS)
    assert [g.name for g in recipe.gyms] == ["tau2"]
    assert recipe.gyms[0].options == {"data_dir": "/data/tau2"}


def test_overrides_apply_to_the_recipe_section_the_flag_keeps(tmp_path):
    path = tmp_path / "eval.yaml"
    path.write_text(
        "verb: eval\ngyms:\n  - {name: guess, options: {num_test: 3}}\n  - {name: travel}\n"
    )
    recipe, _ = build_recipe([str(path), "gym.options.max_number=9"], gyms=["guess"], **FLAGS)
    assert recipe.gyms[0].options == {"num_test": 3, "max_number": 9}
    recipe, _ = build_recipe([str(path), "gyms.travel.max_turns=4"], gyms=["guess,travel"], **FLAGS)
    assert recipe.gym_section("travel").max_turns == 4
    assert recipe.gym_section("guess").options == {"num_test": 3}


def test_an_override_for_one_gym_with_several_picked_is_refused():
    with pytest.raises(UsageError, match="gyms.tau2.options.data_dir"):
        build_recipe(["gym.options.data_dir=/x"], gyms=["tau", "tau2"], **FLAGS)


def test_an_override_of_a_gym_the_flag_drops_is_refused(tmp_path):
    path = tmp_path / "eval.yaml"
    path.write_text("verb: eval\ngyms:\n  - {name: guess}\n  - {name: travel}\n")
    with pytest.raises(UsageError, match="travel"):
        build_recipe([str(path), "gyms.travel.max_turns=4"], gyms=["guess"], **FLAGS)
