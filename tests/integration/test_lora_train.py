"""GRPO with LoRA adapters (KL against the base with adapters disabled) through `mua train` and
`mua merge`: the reference is the policy until the first update, the engine agrees with the
trainer, checkpoints hold adapters only and resume exactly, and both export forms load in plain
transformers / peft with the trainer's logits.

The runs share work: the 1-rank run uses the in-process hf engine with merged pushes; the 2-rank
run uses `rollout.engine: sglang` against a `mua serve` (SGLang 0.5.23's protocol) with
`rollout.lora_sync: adapter`, so one comparison shows 2 FSDP ranks, the SGLang client and the
adapter push all give the 1-rank merged numbers; the bf16 run pushes adapters to the hf engine."""

from __future__ import annotations

import json
import shutil
import urllib.request

import pytest
import torch

from tests.integration.grpo_helpers import lora_rl_run, shared_guess_setup, write_rl_recipe
from tests.integration.train_helpers import (
    final_params,
    hf_logits,
    metric_history,
    mua_serve,
    run_merge,
    run_train,
)

pytestmark = pytest.mark.integration

LORA = {"rank": 4, "alpha": 8}


def _run(tmp_path, model, train, name, *args, **extra):
    folder = tmp_path / name
    recipe = lora_rl_run(folder, model, train, LORA, *args, **extra)
    return folder / "run", recipe


def test_lora_grpo_trains_pushes_checkpoints_resumes_and_exports(tmp_path_factory, tmp_path):
    from mua.distributed.dcp_offline import checkpoint_tensor_shapes

    model, train, _ = shared_guess_setup(tmp_path_factory)
    one, recipe = _run(tmp_path, model, train, "one", total_steps=2)
    with mua_serve(model) as url:
        two, _ = _run(
            tmp_path,
            model,
            train,
            "two",
            "--nproc-per-node",
            "2",
            parallel={"micro_batch_tokens": 100},
            rollout={"engine": "sglang", "lora_sync": "adapter", "sglang": {"base_urls": [url]}},
            total_steps=2,
            checkpoint={"save_freq": 0},
        )
        with urllib.request.urlopen(url + "/get_server_info", timeout=30) as reply:
            calls = [c["call"] for c in json.loads(reply.read())["call_log"]]
    # the adapter alone went to the server, once per use of the engine (2 steps), the old
    # version unloaded; the base weights never travelled
    assert calls.count("load_lora_adapter_from_tensors") == 2, calls
    assert calls.count("unload_lora_adapter") == 1, calls
    assert not any(c.startswith("update_weights") for c in calls), calls
    assert max(metric_history(two, "engine/probe_logp_diff")) < 1e-4

    kl = metric_history(one, "actor/kl")
    assert abs(kl[0]) < 1e-6 and kl[1] > 1e-6  # reference = base, then apart
    assert max(metric_history(one, "logp_diff_engine_vs_trainer")) < 1e-4  # merged push
    for key in ("loss", "actor/kl", "grad_norm"):
        a, b = metric_history(one, key), metric_history(two, key)
        assert max(abs(x - y) for x, y in zip(a, b, strict=True)) < 1e-5, key
    final_one, final_two = final_params(one), final_params(two)
    assert max(float((final_one[k] - final_two[k]).abs().max()) for k in final_one) < 1e-5

    last = one / "checkpoints" / "global_step_2"
    names = checkpoint_tensor_shapes(last)
    assert names and all(".lora_A." in n or ".lora_B." in n for n in names)
    assert checkpoint_tensor_shapes(last, "optim")  # the adapters' optimizer state

    # exact resume: drop the last checkpoint and export, run the same command again
    shutil.copytree(one / "hf" / "final", tmp_path / "straight")
    shutil.rmtree(last)
    shutil.rmtree(one / "hf" / "final")
    res = run_train(recipe)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "resumed from" in res.stdout + res.stderr
    again = final_params(one)
    from safetensors.torch import load_file

    straight = load_file(str(tmp_path / "straight" / "model.safetensors"))
    assert max(float((again[k] - straight[k]).abs().max()) for k in straight) == 0.0

    # exports: merged (default) and PEFT adapter, each verified against the trainer's forward
    merged = run_merge(last, "--verify", "--out", tmp_path / "merged")
    assert merged.returncode == 0, merged.stderr
    adapter = run_merge(last, "--verify", "--adapter", "--out", tmp_path / "adapter")
    assert adapter.returncode == 0, adapter.stderr
    ids = torch.randint(3, 1999, (2, 16), generator=torch.Generator().manual_seed(5))
    trained = hf_logits(tmp_path / "straight", ids)
    plain = hf_logits(tmp_path / "merged" / "global_step_2", ids)
    assert float((plain - trained).abs().max()) < 1e-4
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32)
    peft_model = PeftModel.from_pretrained(base, tmp_path / "adapter" / "global_step_2").eval()
    with torch.no_grad():
        got = peft_model(input_ids=ids).logits
    assert float((got - trained).abs().max()) < 1e-4
    with torch.no_grad(), peft_model.disable_adapter():
        assert float((peft_model(input_ids=ids).logits - trained).abs().max()) > 1e-4

    # an adapter onto a base of another shape: refused (one line), nothing written
    from mua.errors import UsageError
    from mua.models.lora import read_adapter_info
    from mua.models.merge_lora import merge_lora_checkpoint
    from mua.models.merge_steps import MergeOptions

    with pytest.raises(UsageError, match="does not fit the base") as err:
        merge_lora_checkpoint(
            2, last, tmp_path / "bad", read_adapter_info(last), MergeOptions(base="tiny:qwen3-1m")
        )
    assert "\n" not in str(err.value)
    assert not (tmp_path / "bad").exists()


@pytest.mark.parametrize(
    "lora, says",
    [({"rank": 0}, "must be > 0"), ({"target_modules": ["nope_proj"]}, "matches no layer")],
)
def test_bad_lora_settings_stop_before_the_run(tmp_path_factory, tmp_path, lora, says):
    import yaml

    model, train, _ = shared_guess_setup(tmp_path_factory)
    recipe = write_rl_recipe(tmp_path, model, train)
    data = yaml.safe_load(recipe.read_text())
    data["model"]["lora"] = lora
    recipe.write_text(yaml.safe_dump(data))
    res = run_train(recipe)
    assert res.returncode == 2
    assert says in res.stderr and len(res.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "run").exists()


def test_lora_with_bf16_mixed_precision_and_activation_checkpointing(tmp_path_factory, tmp_path):
    """The reference's first forward (adapters disabled) must not leave FSDP2 reducing the
    adapters' gradients in bf16 (it stopped the first update before the warm-up forward)."""
    model, train, _ = shared_guess_setup(tmp_path_factory)
    run, _ = _run(
        tmp_path,
        model,
        train,
        "bf16",
        parallel={"mixed_precision": "bf16", "activation_checkpointing": True},
        rollout={"lora_sync": "adapter"},  # the hf engine applies the adapter in place
        total_steps=2,
        checkpoint={"save_freq": 0},
    )
    kl = metric_history(run, "actor/kl")
    assert len(kl) == 2 and kl[1] > 0
    assert all(g > 0 for g in metric_history(run, "grad_norm"))
