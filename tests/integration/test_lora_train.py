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
import urllib.request

import pytest
import torch

from tests.integration.grpo_helpers import shared_guess_setup, write_rl_recipe
from tests.integration.lora_helpers import (
    assert_exact_resume,
    assert_exports_serve_it,
    assert_trained_alike,
    lora_rl_run,
    two_rank_lora_run,
)
from tests.integration.train_helpers import metric_history, mua_serve, run_train

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
        sglang = {"engine": "sglang", "lora_sync": "adapter", "sglang": {"base_urls": [url]}}
        two = two_rank_lora_run(tmp_path / "two", model, train, LORA, rollout=sglang)
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
    assert_trained_alike(one, two)

    last = one / "checkpoints" / "global_step_2"
    names = checkpoint_tensor_shapes(last)
    assert names and all(".lora_A." in n or ".lora_B." in n for n in names)
    assert checkpoint_tensor_shapes(last, "optim")  # the adapters' optimizer state

    # exact resume: drop the last checkpoint and export, run the same command again
    assert_exact_resume(one, recipe, last)

    # exports: merged (default) and PEFT adapter, each verified against the trainer's forward
    peft_model, ids, trained = assert_exports_serve_it(last, model, one / "hf" / "final", tmp_path)
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
