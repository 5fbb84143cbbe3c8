"""GRPO learns: `mua train` on `guess` from the warm start raises the training reward.

Learning is judged on this machine's own runs, never against numbers stored from another: a
machine's CPU and math library decide the last bits of every step, and a sampled run then takes
its own path. What holds on every machine is the statistics over seeds, so:

- `make test` runs one seed and asks for a rise well below the smallest one seen over seeds
  (the suite's one end-to-end check that GRPO learns);
- the `slow` test (`make test-all`) runs several seeds and asks that most of them rise and that
  the mean rise is more than two standard errors above zero.

The rise of a run is the mean reward of its last five steps minus that of its first five.
"""

from __future__ import annotations

import statistics

import pytest

from tests.integration.grpo_helpers import shared_guess_setup, write_rl_recipe
from tests.integration.train_helpers import metric_history, run_train

pytestmark = pytest.mark.integration

# 20 steps of 8 tasks × 8 samples at lr 7e-4. Rises measured: data seeds 0-5 in deterministic mode
# +0.12 to +0.20; seeds 0, 1, 2 as run here (AMD EPYC, 2 cores) +0.17, +0.12, +0.21. With 4 samples
# per task or lr 1e-3, half the seeds rose by less than 0.1.
LEARNS = {
    "total_steps": 20,
    "checkpoint": {"save_freq": 0},
    "optim": {"lr": 7e-4},
    "data": {"tasks_per_step": 8},
    "rollout": {"n": 8},
    "track": {"transcripts_per_step": 0},
}
ONE_SEED_MARGIN = 0.05
SEEDS = (0, 1, 2, 3, 4)
SEEDS_RISING = 4  # of SEEDS, at least this many rise at all


def _rise(rewards: list[float]) -> float:
    assert len(rewards) == LEARNS["total_steps"], rewards
    return sum(rewards[-5:]) / 5 - sum(rewards[:5]) / 5


@pytest.fixture(scope="module")
def learning_run(tmp_path_factory):
    """The reward history of the learning recipe with data seed `seed`, each seed run once."""
    model, train, _ = shared_guess_setup(tmp_path_factory)
    done: dict[int, list[float]] = {}

    def run(seed: int) -> list[float]:
        if seed not in done:
            folder = tmp_path_factory.mktemp(f"grpo-learns-{seed}")
            data = {**LEARNS["data"], "seed": seed}
            recipe = write_rl_recipe(folder, model, train, **{**LEARNS, "data": data})
            res = run_train(recipe, timeout_s=900)
            assert res.returncode == 0, res.stderr[-3000:]
            done[seed] = metric_history(folder / "run", "reward/mean")
        return done[seed]

    return run


@pytest.mark.timeout(900)
def test_grpo_raises_the_training_reward(learning_run):
    rewards = learning_run(SEEDS[0])
    assert _rise(rewards) > ONE_SEED_MARGIN, rewards


@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_grpo_raises_the_reward_over_seeds(learning_run):
    rises = [_rise(learning_run(seed)) for seed in SEEDS]
    mean, spread = statistics.mean(rises), statistics.stdev(rises)
    assert sum(r > 0 for r in rises) >= SEEDS_RISING, rises
    assert mean > 2 * spread / len(rises) ** 0.5, rises
