"""A tiny gpt-oss mixture of experts (tiny:gptoss-2m) through `mua train` on CPU: SFT, then 2
GRPO steps with routing replay. The hf engine serves gpt-oss through its left-padded batch,
which records each fed token's experts; the trainer replays them (`moe/` metrics every step) and
its log-probs equal the engine's."""

from __future__ import annotations

import pytest

from tests.integration.grpo_helpers import write_random_guesser_data, write_rl_recipe
from tests.integration.train_helpers import metric_history, run_train, write_sft_recipe

pytestmark = pytest.mark.integration
MODEL = "tiny:gptoss-2m"


def test_gpt_oss_sft_then_grpo_replays_the_engines_routing(guess_setup, tmp_path):
    _, train, _ = guess_setup
    sft = write_sft_recipe(
        tmp_path, write_random_guesser_data(tmp_path), model={"path": MODEL},
        algo={"kind": "sft", "batch_size": 16, "epochs": 2}, optim={"lr": 3e-3},
        checkpoint={"save_freq": 0}, total_steps=100, run_dir=str(tmp_path / "sft"),
    )  # fmt: skip
    res = run_train(sft)
    assert res.returncode == 0, res.stderr[-3000:]
    rl = write_rl_recipe(
        tmp_path, tmp_path / "sft" / "hf" / "final", train, total_steps=2,
        algo={"kind": "grpo", "routing_replay": "r3"}, checkpoint={"save_freq": 0},
    )  # fmt: skip
    res = run_train(rl)
    assert res.returncode == 0, res.stderr[-3000:]
    run = tmp_path / "run"
    assert metric_history(run, "moe/routing_replay") == [1.0, 1.0]
    decisions = metric_history(run, "moe/routed_decisions")
    assert len(decisions) == 2 and min(decisions) > 0
    # the fp32 hf engine routes as the trainer does, and its log-probs equal the trainer's
    assert metric_history(run, "moe/routing_disagreement") == [0.0, 0.0]
    assert max(metric_history(run, "logp_diff_engine_vs_trainer")) < 1e-4
