"""The run layer's spec of a `gyms:` entry: resolved once, frozen, serialisable, and what the
pre-flight serves and asks and eval's resume fingerprint hashes."""

from __future__ import annotations

import json

import pytest

from mua.config import parse_recipe_dict
from mua.run.preflight import served_folders
from mua.run.spec import RunSpec, run_spec


def _recipe(**gym):
    return parse_recipe_dict(
        {
            "verb": "eval",
            "model": {"path": "tiny:qwen3-1m"},
            "user": {"kind": "llm", "checkpoint": "runs/u/hf/final", "model": "u"},
            "rollout": {"max_turns": 5},
            "gyms": [{"name": "guess", **gym}],
        },
        verb="eval",
    )


def test_a_spec_resolves_the_entry_user_and_budgets_once():
    recipe = _recipe(label="g", max_turns=3, options={"max_number": 9})
    spec = run_spec(recipe, recipe.gyms[0])
    assert spec.label == "g"
    assert spec.gym == "guess"
    assert spec.options == {"max_number": 9}
    assert spec.settings["max_turns"] == 3  # the entry's budget over the recipe's 5
    assert spec.user["kind"] == "llm" and spec.user["checkpoint"] == "runs/u/hf/final"
    assert "train_files" not in spec.settings and "label" not in spec.settings


def test_a_spec_is_frozen_and_round_trips_through_json():
    recipe = _recipe(options={"max_number": 9})
    spec = run_spec(recipe, recipe.gyms[0])
    with pytest.raises(TypeError):
        spec.settings["options"]["max_number"] = 3  # read-only, nested too
    with pytest.raises(AttributeError):
        spec.label = "other"
    again = RunSpec.from_dict(json.loads(json.dumps(spec.to_dict())))
    assert again == spec
    assert again.to_dict() == spec.to_dict()


def test_only_the_folders_a_spec_uses_are_served():
    """An entry whose own user is scripted does not call the recipe's LLM user: its checkpoint
    is not served; a seat's fixed agent's checkpoint is."""
    recipe = _recipe(user={"kind": "scripted"})
    assert served_folders([run_spec(recipe, recipe.gyms[0])]) == []
    recipe = _recipe()
    assert served_folders([run_spec(recipe, recipe.gyms[0])]) == ["runs/u/hf/final"]
    judge = {"model": "j", "checkpoint": "runs/j/hf/final"}
    assert served_folders([run_spec(recipe, recipe.gyms[0])], judge) == [
        "runs/u/hf/final",
        "runs/j/hf/final",
    ]
