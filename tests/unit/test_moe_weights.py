"""A mixture of experts' weights: pushed to serving engines per expert, as its checkpoint names
them (`mua.models.moe_layout`)."""

from __future__ import annotations

import torch
from safetensors.torch import load_file

from mua.models import load_model, load_tokenizer
from mua.models.moe_layout import per_expert
from mua.models.saving import save_hf


def test_fused_experts_split_as_the_checkpoint_holds_them(tmp_path):
    model = load_model("tiny:qwen3moe-2m")
    folder = save_hf(model, load_tokenizer("tiny:qwen3moe-2m"), tmp_path / "m")
    saved = {}
    for file in folder.glob("*.safetensors"):
        saved.update(load_file(file))
    pushed = dict(per_expert(model.state_dict().items(), "qwen3_moe"))
    pushed.pop("lm_head.weight", None)  # tied to the embedding: the checkpoint holds it once
    assert pushed.keys() == saved.keys()
    assert all(torch.equal(pushed[k], saved[k]) for k in saved)
    assert "model.layers.3.mlp.experts.7.up_proj.weight" in pushed


def test_other_models_pass_through_unchanged():
    named = [("model.layers.0.mlp.experts.gate_up_proj", torch.zeros(4, 6, 3))]
    assert list(per_expert(named, "gpt_oss")) == named
    dense = [("model.layers.0.mlp.up_proj.weight", torch.zeros(2, 2))]
    assert list(per_expert(dense, "qwen3_moe")) == dense


def test_moe_sizes_count_total_active_and_expert_parameters():
    from mua.models.model_loading import meta_model
    from mua.train.memory_estimate import GIB, ModelShape, RunShape, estimate_memory, moe_sizes

    model = meta_model("tiny:qwen3moe-2m")  # no weights read
    sizes = moe_sizes(model)
    experts = 4 * (
        8 * 256 * 128 + 8 * 128 * 128
    )  # 4 layers' gate_up [8, 256, 128], down [8, 128, 128]
    assert (sizes.total, sizes.experts) == (2_030_976, experts)
    assert sizes.active == 2_030_976 - experts + experts * 2 // 8
    assert (sizes.largest_expert_tensor, sizes.num_experts, sizes.top_k) == (8 * 256 * 128, 8, 2)
    assert moe_sizes(meta_model("tiny:qwen3-1m")) is None
    shape = ModelShape.from_hf_config(model.config, num_params=sizes.total, moe=sizes)
    rows = dict(estimate_memory(shape, RunShape(), 80 * GIB).train_rows)
    assert rows["weight push: one layer's fused experts gathered (fp32)"] == 4 * 8 * 256 * 128


def test_doctor_reports_total_and_active_parameters():
    from mua.cli.doctor_cmd import check_model_size

    moe = check_model_size("tiny:qwen3moe-2m")
    assert moe.status == "ok" and "2.0M parameters, 0.9M active per token" in moe.detail
    assert check_model_size("tiny:qwen3-1m").detail == "dense: 1.0M parameters"


def test_cpu_rank_estimate_keeps_the_engine_copy_and_drops_gpu_rows():
    from mua.models.model_loading import meta_model
    from mua.train.memory_estimate import (
        GIB,
        IMPORT_BYTES,
        ModelShape,
        RunShape,
        cpu_rank_bytes,
        estimate_memory,
        moe_sizes,
    )

    model = meta_model("tiny:qwen3moe-2m")
    sizes = moe_sizes(model)
    shape = ModelShape.from_hf_config(model.config, num_params=sizes.total, moe=sizes)
    run = RunShape(world_size=2, train_dtype="float32", engine="hf", engine_memory="copy",
                   engine_dtype="float32", max_total_tokens=128)  # fmt: skip
    est = estimate_memory(shape, run, 80 * GIB)
    train = dict(est.train_rows)
    engine = dict(est.rollout_rows)["engine (hf): weights + KV cache"]
    gpu_only = train["released engine"] + train["CUDA context and fragmentation"]
    assert engine >= sizes.total * 4  # a full fp32 copy per rank
    assert cpu_rank_bytes(est, run) == est.train_bytes - gpu_only + engine + IMPORT_BYTES
