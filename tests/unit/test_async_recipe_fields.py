"""The asynchronous-RL switches of a train recipe: defaults, valid values, one-line errors."""

from __future__ import annotations

import pytest

from mua.config import load_recipe
from mua.errors import UsageError

BROKEN = {
    "oversample_below_one": ("rollout:\n  oversample: 0.5\n", "rollout.oversample"),
    "negative_staleness": ("algo:\n  kind: grpo\n  max_staleness: -1\n", "algo.max_staleness"),
    "unknown_correction": ("algo:\n  kind: grpo\n  correction: vtrace\n", "algo.correction"),
    "cap_not_above_one": ("algo:\n  kind: grpo\n  correction_cap: 1.0\n", "algo.correction_cap"),
    "oversample_without_staleness": (
        "rollout:\n  oversample: 1.5\n",
        "set algo.max_staleness to 1 or more",
    ),
    "oversample_in_sft": (
        "algo:\n  kind: sft\nrollout:\n  oversample: 1.5\n",
        "rollout.oversample applies to RL steps",
    ),
}


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_bad_async_fields_give_one_clear_line(tmp_path, name):
    text, expected = BROKEN[name]
    path = tmp_path / f"{name}.yaml"
    path.write_text(text)
    with pytest.raises(UsageError) as exc:
        load_recipe(path, [], verb="train")
    message = str(exc.value)
    assert expected in message, message
    assert len(message.splitlines()) == 1, message


def test_defaults_are_synchronous(tmp_path):
    path = tmp_path / "r.yaml"
    path.write_text("data:\n  tasks_per_step: 2\n")
    recipe = load_recipe(path, [], verb="train")
    assert recipe.rollout.oversample == 1.0
    assert recipe.algo.max_staleness == 0
    assert recipe.algo.correction == "none"


def test_switches_on_from_overrides(tmp_path):
    path = tmp_path / "r.yaml"
    path.write_text("data:\n  tasks_per_step: 2\nalgo:\n  kind: grpo\n")
    overrides = ["rollout.oversample=1.5", "algo.max_staleness=2", "algo.correction=tis"]
    recipe = load_recipe(path, overrides, verb="train")
    assert (recipe.rollout.oversample, recipe.algo.max_staleness) == (1.5, 2)
    assert recipe.algo.correction == "tis" and recipe.algo.correction_cap == 2.0
