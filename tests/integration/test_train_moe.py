"""A tiny mixture of experts (tiny:qwen3moe-2m) through the verbs on CPU: SFT (with the routers'
load-balancing loss), GRPO with routing replay (checkpoints and a resume), PPO with routing
replay, GRPO with LoRA on the experts (`model.lora.experts`), `mua merge --verify`, `mua eval`,
`mua serve`.

The GRPO run records the hf engine's routed experts with every trajectory and replays them in the
trainer's forwards: it logs `moe/routing_disagreement` and `moe/routing_replay` every step, and the
engine's log-probs equal the trainer's after each push.
"""

from __future__ import annotations

import json
import math
import urllib.request

import pytest

from tests.integration.grpo_helpers import write_random_guesser_data, write_rl_recipe
from tests.integration.lora_helpers import lora_rl_run
from tests.integration.train_helpers import (
    metric_history,
    mua_serve,
    run_merge,
    run_train,
    write_sft_recipe,
)

pytestmark = pytest.mark.integration
MODEL = "tiny:qwen3moe-2m"


@pytest.fixture(scope="module")
def moe_runs(guess_setup, tmp_path_factory):
    """(SFT run dir, GRPO run dir): SFT on the random guesser's games (48 steps: enough for the
    policy to score some games), 2 GRPO steps from it with replay, then the same command with
    total_steps=3 (a resume from step 2)."""
    _, train, test = guess_setup
    folder = tmp_path_factory.mktemp("moe")
    sft = write_sft_recipe(
        folder, write_random_guesser_data(folder), model={"path": MODEL},
        algo={"kind": "sft", "batch_size": 16, "epochs": 8, "router_aux_coef": 0.001},
        optim={"lr": 3e-3},
        checkpoint={"save_freq": 0}, total_steps=100, run_dir=str(folder / "sft"),
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
    # 96 conversations, 16 a step, eight epochs: 48 steps; 1 at an even load, 8 experts at most
    assert len(aux) == 48 and all(0 < v < 8 for v in aux)


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


def test_ppo_with_replay_trains_the_moe_policy_and_its_critic(moe_runs, guess_setup, tmp_path):
    sft, _ = moe_runs
    _, train, _ = guess_setup
    ppo = {"kind": "ppo", "critic_lr": 1e-3, "lam": 0.95, "epochs": 2, "mini_batches": 2,
           "routing_replay": "r3"}  # fmt: skip
    recipe = write_rl_recipe(tmp_path, sft / "hf" / "final", train, algo=ppo, total_steps=2)
    res = run_train(recipe)
    assert res.returncode == 0, res.stderr[-3000:]
    run = tmp_path / "run"
    assert metric_history(run, "moe/routing_replay") == [1.0, 1.0]
    assert min(metric_history(run, "moe/routed_decisions")) > 0
    assert max(metric_history(run, "logp_diff_engine_vs_trainer")) < 1e-4
    vf = metric_history(run, "critic/vf_loss")  # the SFT policy scores: the critic has returns
    assert len(vf) == 2 and all(math.isfinite(v) and v > 0 for v in vf), vf
    assert (run / "checkpoints" / "global_step_2" / "critic" / ".metadata").exists()


def _post(url: str, body: dict) -> dict:
    req = urllib.request.Request(
        url, json.dumps(body).encode(), {"Content-Type": "application/json"}, method="POST"
    )
    with urllib.request.urlopen(req, timeout=120) as resp:
        return json.loads(resp.read())


def test_mua_serve_answers_with_the_moe_checkpoint(moe_runs):
    import torch
    from transformers import AutoModelForCausalLM

    from mua.models import load_tokenizer

    sft, _ = moe_runs
    folder = sft / "hf" / "final"
    tok = load_tokenizer(str(folder))
    messages = [{"role": "user", "content": "Guess the number."}]
    prompt = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    ids = tok.encode(prompt, add_special_tokens=False)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    greedy = model.generate(torch.tensor([ids]), max_new_tokens=6, do_sample=False,
                            min_new_tokens=6)[0, len(ids):].tolist()  # fmt: skip
    with mua_serve(folder) as url:
        chat = _post(url + "/v1/chat/completions",
                     {"model": "m", "messages": messages, "max_tokens": 6, "temperature": 0})  # fmt: skip
        native = _post(url + "/generate", {"input_ids": ids, "sampling_params": {
            "temperature": 0, "max_new_tokens": 6, "stop_token_ids": []}})  # fmt: skip
    assert chat["usage"]["prompt_tokens"] == len(ids)
    assert chat["choices"][0]["message"]["role"] == "assistant"
    assert native["output_ids"] == greedy  # the served MoE's greedy tokens are the model's own


def test_grpo_with_lora_on_the_experts_merges_and_pushes_them(moe_runs, guess_setup, tmp_path):
    from safetensors.torch import load_file

    sft, _ = moe_runs
    _, train, _ = guess_setup
    lora = {"rank": 4, "alpha": 8, "experts": True}
    lora_rl_run(tmp_path / "lora", sft / "hf" / "final", train, lora, total_steps=2,
                algo={"kind": "grpo", "routing_replay": "r3"}, checkpoint={"save_freq": 2})  # fmt: skip
    run = tmp_path / "lora" / "run"
    # each push merges the expert adapters: the engine's log-probs are the trainer's
    assert max(metric_history(run, "logp_diff_engine_vs_trainer")) < 1e-4
    res = run_merge(run / "checkpoints", "--verify")
    assert res.returncode == 0, res.stderr[-3000:]
    info = json.loads((run / "hf" / "global_step_2" / "merge_info.json").read_text())
    assert info["verify_max_logit_diff"] < 1e-4, info
    # written per expert, as the checkpoints are: the projections of the experts that tokens
    # went to moved (an expert no token chose keeps B = 0), in every layer; the routers did not
    merged = load_file(str(run / "hf" / "global_step_2" / "model.safetensors"))
    base = load_file(str(sft / "hf" / "final" / "model.safetensors"))
    assert merged.keys() == base.keys()
    experts = [k for k in base if ".mlp.experts." in k]
    moved = {k for k in experts if float((merged[k] - base[k]).abs().max()) > 1e-7}
    assert len(experts) == 4 * 8 * 3 and len(moved) >= 0.75 * len(experts), sorted(moved)
    for layer in range(4):
        for proj in ("gate_proj", "up_proj", "down_proj"):
            assert any(f"layers.{layer}." in k and proj in k for k in moved), (layer, proj)
        router = f"model.layers.{layer}.mlp.gate.weight"
        assert (merged[router] == base[router]).all()
