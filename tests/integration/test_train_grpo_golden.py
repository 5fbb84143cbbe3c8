"""The tiny GRPO run on `guess` learns (reward goes up over 20 steps) and reproduces its golden
numbers (tests/golden/grpo_guess.json, written only by scripts/regen_golden.py)."""

from __future__ import annotations

import json

import pytest

from tests.integration.grpo_helpers import (
    GOLDEN_FILE,
    GOLDEN_OVERRIDES,
    run_golden,
    shared_guess_setup,
)

pytestmark = pytest.mark.integration


def _window_mean(values: list[float], lo: int, hi: int) -> float:
    part = values[lo:hi]
    return sum(part) / len(part)


def test_grpo_guess_matches_golden_and_improves(tmp_path_factory, tmp_path):
    golden = json.loads(GOLDEN_FILE.read_text())
    assert golden["overrides"] == GOLDEN_OVERRIDES, (
        "the golden recipe changed: run scripts/regen_golden.py"
    )
    model, train, _ = shared_guess_setup(tmp_path_factory)
    metrics, res = run_golden(tmp_path, model, train)
    assert metrics, res.stderr[-3000:]
    rewards, want = metrics["reward/mean"], golden["metrics"]["reward/mean"]
    assert len(rewards) == 20
    # Upward trend: the last five steps beat the first five by a clear margin.
    assert _window_mean(rewards, 15, 20) > _window_mean(rewards, 0, 5) + 0.1
    # Same numbers as the golden run (loose enough for float noise across CPUs).
    assert (
        max(abs(a - b) for a, b in zip(metrics["loss"], golden["metrics"]["loss"], strict=False))
        < 1e-3
    )
    assert max(abs(a - b) for a, b in zip(rewards, want, strict=False)) < 0.07
