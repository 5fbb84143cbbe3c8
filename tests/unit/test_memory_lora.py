"""The memory estimate with LoRA: `lora_params` counts what peft adds (attention layers, and
the per-expert adapters with `model.lora.experts`), and only those parameters get gradients and
optimizer state; the frozen base still has its fp32 weights."""

from __future__ import annotations

import pytest

from mua.models import load_model
from mua.models.lora import add_adapters
from mua.train.memory_estimate import ModelShape, RunShape, estimate_memory, lora_params

GIB = 1024**3


def _lora(experts: bool, target="all-linear") -> dict:
    return {"rank": 4, "alpha": 8, "dropout": 0.0, "target_modules": target,
            "experts": experts, "embeddings": False}  # fmt: skip


def _trainable(model) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


@pytest.mark.parametrize(
    ("preset", "experts", "expected"),
    [
        # q/k/v/o of 4 layers: 4 x 4 x (256 + 192 + 192 + 256) = 14336; experts (8 a layer,
        # width 128, hidden 128): 4 layers x 4 x 8 x (2 x 128 + 3 x 128) = 81920
        ("tiny:qwen3moe-2m", False, 14_336),
        ("tiny:qwen3moe-2m", True, 14_336 + 81_920),
        ("tiny:gptoss-2m", False, 14_336),
        ("tiny:gptoss-2m", True, 14_336 + 81_920),
    ],
)
def test_the_adapter_count_is_peft_s(preset, experts, expected):
    base = load_model(preset)
    counted = lora_params(base, 4, "all-linear", experts)
    wrapped = add_adapters(load_model(preset), _lora(experts))
    assert counted == _trainable(wrapped)
    assert lora_params(wrapped, 4, "all-linear", experts) == counted  # with its adapters already
    assert counted == expected


def test_named_targets_and_the_expert_formula():
    base = load_model("tiny:qwen3moe-2m")
    c = base.config
    wrapped = add_adapters(load_model("tiny:qwen3moe-2m"), _lora(False, ["q_proj", "v_proj"]))
    assert lora_params(base, 4, ["q_proj", "v_proj"]) == _trainable(wrapped)
    experts = lora_params(base, 4, "all-linear", True) - lora_params(base, 4, "all-linear")
    per_layer = 4 * c.num_experts * (2 * c.hidden_size + 3 * c.moe_intermediate_size)
    assert experts == per_layer * c.num_hidden_layers > 0


def test_lora_trains_only_the_adapters_memory():
    shape = dict(num_params=8_000_000_000, num_layers=36, hidden_size=4096, vocab_size=151_936,
                 num_kv_heads=8, head_dim=128)  # fmt: skip
    full = estimate_memory(ModelShape(**shape), RunShape(), 80 * GIB)
    lora = estimate_memory(ModelShape(**shape, trainable=40_000_000), RunShape(), 80 * GIB)
    rows = dict(lora.train_rows)
    assert rows["trainer weights (fp32, sharded)"] == 8_000_000_000 * 4  # the frozen base too
    assert rows["optimizer state (AdamW, sharded, 40.00M LoRA parameters)"] == 40_000_000 * 8
    assert rows["gradients (fp32, sharded, 40.00M LoRA parameters)"] == 40_000_000 * 4
    assert full.train_bytes - lora.train_bytes == (8_000_000_000 - 40_000_000) * 12


def test_the_preflight_counts_a_lora_runs_expert_adapters(capsys):
    from pathlib import Path

    from mua.config import load_recipe
    from mua.train.engine_sync import memory_preflight

    quickstart = Path(__file__).resolve().parents[2] / "recipes" / "quickstart.yaml"
    args = ["model.path=tiny:qwen3moe-2m", "rollout.engine=sglang", "model.lora.rank=4",
            "model.lora.experts=true", "model.lora.dropout=0"]  # fmt: skip
    recipe = load_recipe(str(quickstart), args, verb="train")
    model = add_adapters(load_model("tiny:qwen3moe-2m"), recipe.model.lora)
    table = memory_preflight(recipe, model, world_size=1, gpu_bytes=80 * GIB, show=False)
    assert "optimizer state (AdamW, sharded, 0.10M LoRA parameters)" in table  # 96256
