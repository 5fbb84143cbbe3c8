"""PPO improves the policy: a short `mua train` PPO run on `guess`, from the warm start, raises the
held-out reward (`val/reward_mean`, the trainer's own validation on test tasks) by a clear margin.

The before-training number is the trainer's first validation: the policy takes no optimizer step
during the critic's warm-up (checked) and validation runs when the warm-up ends, so that number is
the warm model's, on the same test tasks and with the same sampling seeds as the last one.
The run is in deterministic mode (mua.determinism) from the golden GRPO run's warm start, so its
numbers are the same on every machine: the margin was measured on exactly this computation, and
over other data seeds.
"""

from __future__ import annotations

import pytest

from tests.integration.grpo_helpers import (
    GOLDEN_ENV,
    golden_setup,
    write_guess_tasks,
    write_rl_recipe,
)
from tests.integration.train_helpers import metric_history, run_train

pytestmark = [pytest.mark.integration, pytest.mark.timeout(1200)]

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
# Below the smallest gain measured over data seeds (per-seed numbers in the commit that set it).
MARGIN = 0.05


def test_ppo_raises_the_held_out_reward(tmp_path_factory, tmp_path):
    model, train = golden_setup(tmp_path_factory)
    _, test = write_guess_tasks(tmp_path / "tasks", num_test=NUM_TEST)
    recipe = write_rl_recipe(tmp_path, model, train, test, name="ppo.yaml", **PPO_LEARNS)
    res = run_train(recipe, env_extra=GOLDEN_ENV, timeout_s=1200)
    assert res.returncode == 0, res.stderr[-3000:]
    run = tmp_path / "run"
    steps = metric_history(run, "optimizer_steps")
    assert len(steps) == 3 * WARMUP
    assert steps[:WARMUP] == [0.0] * WARMUP and min(steps[WARMUP:]) > 0, steps
    assert metric_history(run, "val/num_trajectories") == [NUM_TEST * 4.0] * 3
    val = metric_history(run, "val/reward_mean")
    assert len(val) == 3, val
    before, after = val[0], val[-1]
    assert after > before + MARGIN, f"held-out reward {before:.3f} -> {after:.3f} ({val})"
