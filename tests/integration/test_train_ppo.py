"""PPO through `mua train` on CPU (gloo): the value-head critic trains, its checkpoint is written
and a resumed run loads it back (one uninterrupted three-step run serves both checks)."""

from __future__ import annotations

import math

import pytest

from tests.integration.grpo_helpers import shared_guess_setup, write_rl_recipe
from tests.integration.train_helpers import final_params, metric_history, run_train

pytestmark = pytest.mark.integration

PPO = {"kind": "ppo", "critic_lr": 1e-3, "lam": 0.95, "epochs": 4, "mini_batches": 2}


@pytest.fixture(scope="module")
def straight_run(tmp_path_factory):
    """Three PPO steps, a checkpoint after each, no interruption."""
    model, train, _ = shared_guess_setup(tmp_path_factory)
    folder = tmp_path_factory.mktemp("ppo-straight")
    recipe = write_rl_recipe(
        folder, model, train, algo=PPO, total_steps=3, checkpoint={"save_freq": 1}
    )
    res = run_train(recipe)
    assert res.returncode == 0, res.stderr[-3000:]
    return folder / "run"


def test_ppo_critic_learns_and_is_checkpointed(straight_run):
    run = straight_run
    vf = metric_history(run, "critic/vf_loss")
    loss = metric_history(run, "loss")
    assert len(vf) == 3 and all(math.isfinite(v) and v > 0 for v in vf)
    assert len(loss) == 3 and all(math.isfinite(v) for v in loss)
    # Within each step the critic fits the same returns better in its last epoch than in its first.
    first = metric_history(run, "critic/vf_loss_first_epoch")
    last = metric_history(run, "critic/vf_loss_last_epoch")
    assert len(first) == 3 and all(b < a for a, b in zip(first, last, strict=False)), (first, last)
    critic_dir = run / "checkpoints" / "global_step_3" / "critic"
    assert (critic_dir / ".metadata").exists()


def test_ppo_resume_matches_uninterrupted(tmp_path_factory, straight_run, tmp_path):
    """Policy, critic, both optimizers and the data position come back from the checkpoint."""
    model, train, _ = shared_guess_setup(tmp_path_factory)
    recipe = write_rl_recipe(
        tmp_path, model, train, algo=PPO, total_steps=3, checkpoint={"save_freq": 1}
    )
    first = run_train(recipe, "total_steps=1")
    assert first.returncode == 0, first.stderr[-3000:]
    res = run_train(recipe)
    assert res.returncode == 0, res.stderr[-3000:]
    runs = {"straight": straight_run, "resumed": tmp_path / "run"}
    for key in ("loss", "critic/vf_loss", "reward/mean"):
        a, b = metric_history(runs["straight"], key), metric_history(runs["resumed"], key)
        assert len(a) == len(b) == 3, key
        assert max(abs(x - y) for x, y in zip(a, b, strict=True)) <= 1e-6, key
    a, b = final_params(runs["straight"]), final_params(runs["resumed"])
    assert max(float((a[k] - b[k]).abs().max()) for k in a) <= 1e-6
