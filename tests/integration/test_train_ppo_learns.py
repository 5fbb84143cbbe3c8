"""PPO improves the policy: short `mua train` PPO runs on `guess`, from the warm start, raise the
held-out reward (`val/reward_mean`, the trainer's own validation on test tasks), over seeds.

The before-training number is the trainer's first validation: the policy takes no optimizer step
during the critic's warm-up (checked) and validation runs when the warm-up ends, so that number is
the warm model's, on the same test tasks and with the same sampling seeds as the last one.
Judged over several data seeds on this machine (a sampled run's path depends on the CPU's last
bits, so no single run's numbers are expected elsewhere): most seeds rise by the margin, and the
mean rise exceeds it. Several minutes: marked `slow` (`make test-all`); `make test` checks that
PPO trains (tests/integration/test_train_ppo.py) and that its update matches the float64
reference (tests/unit/test_update_reference.py).
"""

from __future__ import annotations

import pytest

from tests.integration.grpo_helpers import (
    shared_guess_setup,
    write_guess_tasks,
    write_rl_recipe,
)
from tests.integration.train_helpers import metric_history, run_train

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(3600)]

WARMUP = 2  # critic-only steps; validation every WARMUP steps: before, midway, after
# A critic that fits slowly (critic_lr 1e-3) or a faster policy (lr 1e-3 with 2 epochs, or 2e-3)
# broke the `[answer] N` format within a step on some data seeds (held-out reward to 0); these
# settings raised the held-out reward on every seed tried.
PPO_LEARNS = {
    "algo": {
        "kind": "ppo",
        "critic_lr": 3e-3,
        "lam": 0.95,
        "epochs": 4,
        "mini_batches": 2,
        "critic_warmup_steps": WARMUP,
    },
    "optim": {"lr": 5e-4},
    "data": {"tasks_per_step": 8},
    "rollout": {"n": 4},
    # sampled, not greedy: the expected reward moves smoothly; every validation draws the same
    # seeds, so before and after differ by the policy, not by the draw
    "eval": {"test_freq": WARMUP, "n": 4, "temperature": 1.0},
    "total_steps": 3 * WARMUP,
    "checkpoint": {"save_freq": 0},
    "track": {"transcripts_per_step": 0},
}
# Test tasks: 16 rather than the shared 8, whose targets are half 1s (a policy can improve on
# the training targets, uniform over 1..4, and not on those).
NUM_TEST = 16
# Below the smallest gain measured over data seeds in deterministic mode (per-seed numbers in the
# commit that set it).
MARGIN = 0.05
SEEDS = (0, 1, 2)
SEEDS_RISING = 2  # of SEEDS, at least this many rise by MARGIN


def _held_out_rewards(folder, model, train, test, seed: int) -> list[float]:
    folder.mkdir()
    data = {**PPO_LEARNS["data"], "seed": seed}
    recipe = write_rl_recipe(
        folder, model, train, test, name="ppo.yaml", **{**PPO_LEARNS, "data": data}
    )
    res = run_train(recipe, timeout_s=1200)
    assert res.returncode == 0, res.stderr[-3000:]
    run = folder / "run"
    steps = metric_history(run, "optimizer_steps")
    assert len(steps) == 3 * WARMUP
    assert steps[:WARMUP] == [0.0] * WARMUP and min(steps[WARMUP:]) > 0, steps
    assert metric_history(run, "val/num_trajectories") == [NUM_TEST * 4.0] * 3
    val = metric_history(run, "val/reward_mean")
    assert len(val) == 3, val
    return val


def test_ppo_raises_the_held_out_reward_over_seeds(tmp_path_factory, tmp_path):
    model, train, _ = shared_guess_setup(tmp_path_factory)
    _, test = write_guess_tasks(tmp_path / "tasks", num_test=NUM_TEST)
    runs = {s: _held_out_rewards(tmp_path / f"seed{s}", model, train, test, s) for s in SEEDS}
    rises = [val[-1] - val[0] for val in runs.values()]
    assert sum(r > MARGIN for r in rises) >= SEEDS_RISING, runs
    assert sum(rises) / len(rises) > MARGIN, runs
