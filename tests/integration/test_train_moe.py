"""A tiny mixture of experts (tiny:qwen3moe-2m) through the verbs on CPU: SFT (with the routers'
load-balancing loss), GRPO with routing replay (checkpoints and a resume), `mua merge --verify`,
`mua eval`.

The GRPO run records the hf engine's routed experts with every trajectory and replays them in the
trainer's forwards: it logs `moe/routing_disagreement` and `moe/routing_replay` every step, and the
engine's log-probs equal the trainer's after each push.
"""

from __future__ import annotations

import json

import pytest

from tests.integration.grpo_helpers import write_random_guesser_data, write_rl_recipe
from tests.integration.train_helpers import metric_history, run_train, write_sft_recipe

pytestmark = pytest.mark.integration
MODEL = "tiny:qwen3moe-2m"


@pytest.fixture(scope="module")
def moe_runs(guess_setup, tmp_path_factory):
    """(SFT run dir, GRPO run dir): SFT on the random guesser's games, 2 GRPO steps from it with
    replay, then the same command with total_steps=3 (a resume from step 2)."""
    _, train, test = guess_setup
    folder = tmp_path_factory.mktemp("moe")
    sft = write_sft_recipe(
        folder, write_random_guesser_data(folder), model={"path": MODEL},
        algo={"kind": "sft", "batch_size": 16, "epochs": 1, "router_aux_coef": 0.001},
        optim={"lr": 3e-3},
        checkpoint={"save_freq": 0}, total_steps=8, run_dir=str(folder / "sft"),
    )  # fmt: skip
    res = run_train(sft)
    assert res.returncode == 0, res.stderr[-3000:]
    rl = write_rl_recipe(
        folder, folder / "sft" / "hf" / "final", train, test, total_steps=2,
        algo={"kind": "grpo", "routing_replay": "r3"},
    )  # fmt: skip
    for steps in ("2", "3"):
        res = run_train(rl, f"total_steps={steps}")
        assert res.returncode == 0, res.stderr[-3000:]
    return folder / "sft", folder / "run"


def test_sft_logs_the_routers_load_balancing_loss(moe_runs):
    sft, _ = moe_runs
    aux = metric_history(sft, "moe/aux_loss")
    # 96 conversations, 16 a step, one epoch: 6 steps; 1 at an even load, 8 experts at most
    assert len(aux) == 6 and all(0 < v < 8 for v in aux)


def test_grpo_replays_the_engines_routing_and_resumes(moe_runs):
    _, run = moe_runs
    assert metric_history(run, "moe/routing_replay") == [1.0, 1.0, 1.0]
    decisions = metric_history(run, "moe/routed_decisions")
    assert len(decisions) == 3 and min(decisions) > 0
    # the fp32 hf engine routes as the trainer does, and its log-probs equal the trainer's
    assert metric_history(run, "moe/routing_disagreement") == [0.0, 0.0, 0.0]
    assert max(metric_history(run, "logp_diff_engine_vs_trainer")) < 1e-4
    steps = [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2, 3]  # step 3 resumed from the step-2 checkpoint


def test_merge_verify_and_eval_the_moe_checkpoint(moe_runs, mua_cli, tmp_path):
    _, run = moe_runs
    code, out, err = mua_cli("merge", str(run / "checkpoints"), "--verify")
    assert code == 0, err
    merged = run / "hf" / "global_step_3"
    config = json.loads((merged / "config.json").read_text())
    assert (config["model_type"], config["num_local_experts"]) == ("qwen3_moe", 8)
    code, out, err = mua_cli(
        "eval", "--gym", "guess", "--model", str(merged), "-n", "2", "--max-tasks", "2",
        "--out", str(tmp_path / "eval"),
    )  # fmt: skip
    assert code == 0, err
    summary = json.loads((tmp_path / "eval" / "summary.json").read_text())
    assert summary["gyms"]["guess"]["num_trajectories"] == 4
