"""The gateway quickstart learns: an agent program written with the openai SDK, trained through
the training gateway, raises its training reward on `guess`, judged over seeds as the built-in
quickstart's learning test judges it (tests/integration/test_train_grpo_learns.py).

Each seed runs the documented pipeline with real `mua` commands in its own folder (the seeds side
by side): prep (guess 1..8) -> the careless expert's rollouts -> the quickstart's SFT warm start
-> `mua train recipes/gateway_quickstart.yaml`. The rise of a seed is the mean `reward/mean` of
its last five steps minus that of its first five; the gateway quickstart learns when at least two
of the three seeds rise and the mean rise exceeds two standard errors. Nothing is compared with
numbers stored from another machine.
"""

from __future__ import annotations

import statistics
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.integration.train_helpers import metric_history, run_mua_in

pytestmark = pytest.mark.integration

RECIPES = Path(__file__).resolve().parents[2] / "recipes"
SEEDS = (0, 1, 2)


def _rise(folder: Path, seed: int) -> float:
    folder.mkdir(parents=True)
    run_mua_in(folder, "prep", "--gym", "guess", "--option", "max_number=8", "--out", "data/guess")
    run_mua_in(folder, "rollout", str(RECIPES / "quickstart_rollout.yaml"))
    seeds = (f"model.seed={seed}", f"data.seed={seed}")
    run_mua_in(folder, "train", str(RECIPES / "quickstart_sft.yaml"), *seeds, "--no-resume")
    run_mua_in(folder, "train", str(RECIPES / "gateway_quickstart.yaml"), *seeds, "--no-resume")
    rewards = metric_history(folder / "runs" / "gateway_quickstart", "reward/mean")
    assert len(rewards) == 20, rewards
    return sum(rewards[-5:]) / 5 - sum(rewards[:5]) / 5


@pytest.mark.slow
@pytest.mark.timeout(5400)
def test_gateway_quickstart_raises_the_training_reward(tmp_path):
    with ThreadPoolExecutor(max_workers=len(SEEDS)) as pool:
        rises = list(pool.map(lambda s: _rise(tmp_path / f"seed{s}", s), SEEDS))
    mean, sem = statistics.mean(rises), statistics.stdev(rises) / len(rises) ** 0.5
    assert sum(r > 0 for r in rises) >= 2 and mean > 2 * sem, rises
