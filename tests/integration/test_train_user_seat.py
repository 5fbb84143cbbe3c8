"""The user-seat quickstart under `mua train` (torchrun, CPU): the scripted user's rollout, the
user's SFT warm start, two GRPO steps with `seat: user`, and `mua eval` scoring the user
checkpoint by fidelity. Whether the user learns is scripts/user_seat_learns.py's question."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.integration.train_helpers import metric_history, run_mua_in

pytestmark = pytest.mark.integration

RECIPES = Path(__file__).resolve().parents[2] / "recipes"


def test_user_quickstart_trains_and_evaluates(tmp_path):
    run_mua_in(
        tmp_path, "prep", "--gym", "guess", "--option", "max_number=8", "--out", "data/guess"
    )
    run_mua_in(tmp_path, "rollout", str(RECIPES / "train_user_quickstart_rollout.yaml"))
    data = tmp_path / "runs/train_user_quickstart_rollout/trajectories.jsonl"
    first = json.loads(data.read_text().splitlines()[0])
    roles = [m["role"] for m in first["messages"]]
    assert roles[:3] == ["system", "user", "assistant"]  # the agent speaks as `user`
    assert first["messages"][1]["content"].startswith("[answer]")
    run_mua_in(tmp_path, "train", str(RECIPES / "train_user_quickstart_sft.yaml"), "total_steps=4")
    run_mua_in(
        tmp_path,
        "train",
        str(RECIPES / "train_user_quickstart.yaml"),
        "total_steps=2",
        "data.tasks_per_step=4",
        "rollout.n=4",
    )
    run = tmp_path / "runs/train_user_quickstart"
    rewards = metric_history(run, "reward/mean")
    assert len(rewards) == 2 and all(0.0 <= r <= 1.0 for r in rewards)
    assert len(metric_history(run, "loss")) == 2
    run_mua_in(
        tmp_path,
        "eval",
        str(RECIPES / "train_user_quickstart_eval.yaml"),
        "eval.n=2",
        "--out",
        "runs/eval",
    )
    summary = json.loads((tmp_path / "runs/eval/summary.json").read_text())
    guess = summary["gyms"]["guess"]
    assert set(guess["components"]) == {"fidelity"}
    assert guess["reward_mean"] == pytest.approx(guess["components"]["fidelity"])
    rows = [json.loads(line) for line in (tmp_path / "runs/eval/results.jsonl").open()]
    assert rows and all(
        r["messages"][0]["content"].startswith("You picked the number") for r in rows
    )


@pytest.mark.slow
@pytest.mark.timeout(3600)
@pytest.mark.parametrize("family", ["quickstart", "telepathy", "travel"])
def test_trained_user_beats_its_sft_start(tmp_path, family):
    """docs/user_seat.md's evidence: on guess, telepathy and travel, over seeds 0-2, the held-out
    fidelity after GRPO minus after SFT has a mean above its sample std (a one-sigma rise)."""
    import statistics
    import sys

    sys.path.insert(0, str(RECIPES.parent / "scripts"))
    from user_seat_learns import run_seed

    report, gains = [], []
    for seed in (0, 1, 2):
        before, after = run_seed(tmp_path / family / f"seed_{seed}", family, seed)
        gains.append(after - before)
        report.append(f"{family} seed {seed}: {before:.3f} -> {after:.3f}")
    mean, spread = statistics.mean(gains), statistics.stdev(gains)
    assert mean > 0 and mean > spread, "\n".join(report)
