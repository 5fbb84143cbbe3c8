"""PPO through `mua train` on CPU (gloo): the value-head critic trains, its checkpoint is written
and a resumed run loads it back."""

from __future__ import annotations

import math

import pytest

from tests.integration.grpo_helpers import shared_guess_setup, write_rl_recipe
from tests.integration.train_helpers import metric_history, run_train

pytestmark = pytest.mark.integration

PPO = {"kind": "ppo", "critic_lr": 3e-3, "lam": 0.95, "epochs": 2, "mini_batches": 2}


def test_ppo_two_steps_critic_learns(tmp_path_factory, tmp_path):
    model, train, test = shared_guess_setup(tmp_path_factory)
    recipe = write_rl_recipe(
        tmp_path, model, train, algo=PPO, total_steps=2, checkpoint={"save_freq": 2}
    )
    res = run_train(recipe)
    assert res.returncode == 0, res.stderr[-3000:]
    run = tmp_path / "run"
    vf = metric_history(run, "critic/vf_loss")
    loss = metric_history(run, "loss")
    assert len(vf) == 2 and all(math.isfinite(v) and v > 0 for v in vf)
    assert len(loss) == 2 and all(math.isfinite(v) for v in loss)
    # Within each step the critic fits the same returns better in its last epoch than in its first.
    first = metric_history(run, "critic/vf_loss_first_epoch")
    last = metric_history(run, "critic/vf_loss_last_epoch")
    assert len(first) == 2 and all(b < a for a, b in zip(first, last, strict=False)), (first, last)
    critic_dir = run / "checkpoints" / "global_step_2" / "critic"
    assert (critic_dir / ".metadata").exists()
