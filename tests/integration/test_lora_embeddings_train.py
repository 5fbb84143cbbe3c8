"""GRPO with LoRA on the token embedding and its tied output head (`model.lora.embeddings`)
through `mua train` and `mua merge`: 1 rank (plain module, adapters pushed to the hf engine in
place) and 2 FSDP2 ranks (sharded adapters, merged pushes) give the same losses, gradient norms
and final weights, so the head's tie to the embedding's factors survives sharding and both push
forms serve the trainer's model; the checkpoint holds the embedding's factors and no copy for
the head and a resume from it ends where the straight run ended; both export forms pass
`--verify` and load with the trained model's logits."""

from __future__ import annotations

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
from tests.integration.train_helpers import final_params, metric_history, run_train

LORA = {"rank": 4, "alpha": 8, "embeddings": True}

pytestmark = pytest.mark.integration


def _run(tmp_path, model, train, name, *args, **extra):
    folder = tmp_path / name
    lora_rl_run(folder, model, train, LORA, *args, **extra)
    return folder / "run"


def test_embedding_lora_trains_alike_on_one_and_two_ranks_and_exports(tmp_path_factory, tmp_path):
    from transformers import AutoModelForCausalLM

    from mua.distributed.dcp_offline import checkpoint_tensor_shapes

    model, train, _ = shared_guess_setup(tmp_path_factory)
    one = _run(tmp_path, model, train, "one", rollout={"lora_sync": "adapter"}, total_steps=2)
    two = two_rank_lora_run(tmp_path / "two", model, train, LORA)
    kl = metric_history(one, "actor/kl")
    assert abs(kl[0]) < 1e-6 and kl[1] > 1e-6  # reference = base (embedding adapter off too)
    assert max(metric_history(one, "logp_diff_engine_vs_trainer")) < 1e-4  # adapter push
    assert max(metric_history(two, "logp_diff_engine_vs_trainer")) < 1e-4  # merged push
    assert_trained_alike(one, two)
    final_one = final_params(one)
    assert "lm_head.weight" not in final_one  # tied: the head is the embedding
    sft = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32).state_dict()
    moved = final_one["model.embed_tokens.weight"] - sft["model.embed_tokens.weight"]
    assert float(moved.abs().max()) > 1e-5  # the embedding (and the tied head) trained

    last = one / "checkpoints" / "global_step_2"
    names = set(checkpoint_tensor_shapes(last))
    assert any(".lora_embedding_A." in n for n in names)
    assert not any("lm_head" in n for n in names)

    # exact resume: drop the last checkpoint and export, run the same command again
    assert_exact_resume(one, tmp_path / "one" / "rl.yaml", last)
    assert_exports_serve_it(last, model, one / "hf" / "final", tmp_path)


def test_embedding_adapters_pushed_to_sglang_stop_before_the_run(tmp_path_factory, tmp_path):
    import yaml

    model, train, _ = shared_guess_setup(tmp_path_factory)
    recipe = write_rl_recipe(tmp_path, model, train)
    data = yaml.safe_load(recipe.read_text())
    data["model"]["lora"] = {"rank": 4, "embeddings": True}
    data["rollout"].update(engine="sglang", lora_sync="adapter")
    recipe.write_text(yaml.safe_dump(data))
    res = run_train(recipe)
    assert res.returncode == 2, res.stderr[-2000:]
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "rollout.lora_sync=merged or model.lora.embeddings=false" in lines[0]
    assert not (tmp_path / "run").exists()


def test_embedding_lora_trains_with_bf16_and_activation_checkpointing(tmp_path_factory, tmp_path):
    """One rank under FSDP2 (bf16 compute): the embedding's factors, held by the root unit,
    keep their gradients across the reference's forward with the adapters disabled."""
    from transformers import AutoModelForCausalLM

    model, train, _ = shared_guess_setup(tmp_path_factory)
    run = _run(
        tmp_path,
        model,
        train,
        "bf16",
        parallel={"mixed_precision": "bf16", "activation_checkpointing": True},
        rollout={"lora_sync": "adapter"},
        total_steps=2,
        checkpoint={"save_freq": 0},
    )
    assert metric_history(run, "actor/kl")[1] > 0
    sft = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32).state_dict()
    moved = final_params(run)["model.embed_tokens.weight"] - sft["model.embed_tokens.weight"]
    assert float(moved.abs().max()) > 1e-5
