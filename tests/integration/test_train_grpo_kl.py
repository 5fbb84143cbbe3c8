"""GRPO with a frozen reference model (KL in the loss) and one epoch of one mini-batch, where the
old log-probs come from the update's own forward: KL starts at 0 and grows, the engine still
agrees with the trainer, and 1 rank equals 2 ranks with small micro-batches."""

from __future__ import annotations

import pytest

from tests.integration.grpo_helpers import shared_guess_setup, write_rl_recipe
from tests.integration.train_helpers import final_params, metric_history, run_train

pytestmark = pytest.mark.integration

ALGO = {"kind": "grpo", "kl": {"coef": 0.5, "estimator": "k3", "placement": "loss"}}


def test_kl_against_the_reference_model_is_rank_and_micro_batch_independent(
    tmp_path_factory, tmp_path
):
    model, train, _ = shared_guess_setup(tmp_path_factory)
    runs = {}
    for name, extra, args in (
        ("one", {}, ()),
        ("two", {"parallel": {"micro_batch_tokens": 100}}, ("--nproc-per-node", "2")),
    ):
        folder = tmp_path / name
        folder.mkdir()
        recipe = write_rl_recipe(
            folder, model, train, algo=ALGO, total_steps=3, checkpoint={"save_freq": 0}, **extra
        )
        res = run_train(recipe, *args)
        assert res.returncode == 0, res.stderr[-3000:]
        runs[name] = folder / "run"

    kl = metric_history(runs["one"], "actor/kl")
    assert len(kl) == 3
    assert abs(kl[0]) < 1e-6  # the policy is the reference until the first update
    assert kl[1] > 1e-6 and kl[2] > 1e-6
    assert metric_history(runs["one"], "optimizer_steps") == [1.0, 1.0, 1.0]
    assert max(metric_history(runs["one"], "logp_diff_engine_vs_trainer")) < 1e-4
    assert max(metric_history(runs["one"], "actor/ratio_mean")) == pytest.approx(1.0, abs=1e-6)
    for key in ("loss", "actor/kl", "grad_norm"):
        a, b = metric_history(runs["one"], key), metric_history(runs["two"], key)
        assert max(abs(x - y) for x, y in zip(a, b, strict=True)) < 1e-5, key
    one, two = final_params(runs["one"]), final_params(runs["two"])
    assert max(float((one[k] - two[k]).abs().max()) for k in one) < 1e-5
