"""The `model` section: which policy (and optional critic) to load, in what precision, and whether
the policy trains LoRA adapters (`model.lora`) instead of all its weights."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, PositiveFloat, PositiveInt, field_validator

from mua.recipe_section import Section

# How tool calls are read from model output (the readers are mua.families.tool_calls and
# mua.families); one list, so a recipe names only readers that exist.
ParserName = Literal[
    "auto",
    "hermes",
    "qwen3_coder",
    "llama3_json",
    "mistral",
    "gpt_oss",
    "glm4_5",
    "kimi_k2",
    "deepseek_v3_1",
    "deepseek_v3_2",
    "bracket",
]


class LoraConfig(Section):
    """LoRA adapters on the policy (built with `peft`): only they train, the base stays frozen."""

    rank: PositiveInt = Field(16, description="Adapter rank r (> 0).")
    alpha: PositiveFloat = Field(
        32.0, description="LoRA alpha; the adapter's output is scaled by alpha / rank."
    )
    dropout: float = Field(0.0, ge=0.0, lt=1.0, description="Dropout on the adapter's input.")
    target_modules: Literal["all-linear"] | list[str] = Field(
        "all-linear",
        description="`all-linear` (every linear layer of the decoder blocks, MLP included; not "
        "the output head) or a list of module names (e.g. [q_proj, v_proj]).",
    )
    embeddings: bool = Field(
        False,
        description="Also adapt the token embedding (peft's LoRA embedding) and the output head: "
        "a head tied to the embedding (tie_word_embeddings) sees the same adapted weight, an "
        "untied head gets an adapter of its own.",
    )
    experts: bool = Field(
        False,
        description="Mixture of experts: also adapt every expert's weights (a rank-r adapter "
        "per expert on the fused gate/up and down tensors, merged per expert); false keeps the "
        "experts and routers frozen. Costs rank × experts × (2·hidden + 3·expert width) "
        "parameters per MoE layer (tiny:qwen3moe-2m at rank 8: 164K in all; Qwen3-30B-A3B at rank "
        "16: 13.1M per layer, 629M in all) plus their fp32 Adam state; needs dropout 0.",
    )

    @field_validator("rank", mode="before")
    @classmethod
    def _rank_positive(cls, v):
        if isinstance(v, int) and not isinstance(v, bool) and v <= 0:
            raise ValueError("must be > 0; typical ranks are 1 to 64, e.g. rank: 16")
        return v

    @field_validator("experts")
    @classmethod
    def _experts_without_dropout(cls, v, info):
        if v and info.data.get("dropout", 0.0):
            raise ValueError("adapters on the experts take no dropout; set model.lora.dropout=0")
        return v

    @field_validator("target_modules")
    @classmethod
    def _names(cls, v):
        if isinstance(v, list) and (not v or any(not str(n).strip() for n in v)):
            raise ValueError("give all-linear or a non-empty list of module names, e.g. [q_proj]")
        return v


class ModelConfig(Section):
    path: str = Field(
        "tiny:qwen3-1m",
        description="Local Hugging Face folder, a hub id (only when online), a checkpoint "
        "directory, or `tiny:<preset>` (a small model built offline from a config, e.g. "
        "tiny:qwen3-1m, tiny:qwen2-10m, tiny:llama-30m).",
    )
    tokenizer: str | None = Field(
        None, description="Tokenizer location when it differs from `path` (default: same as path)."
    )
    dtype: Literal["float32", "bfloat16", "float16"] = Field(
        "float32",
        description="Weights dtype of the hf rollout engine on GPU (on CPU it runs float32). The "
        "trainer keeps float32 master weights and computes in `parallel.mixed_precision`; "
        "`mua merge` and the trainer's HF exports write this dtype.",
    )
    tool_parser: ParserName = Field(
        "auto",
        description="How tool calls are read from model output: `auto` (the family the "
        "model's chat template identifies; for an unknown template <tool_call> blocks, else "
        "bracket actions), a family: `hermes` (Qwen3, <tool_call>{json}</tool_call>), "
        "`qwen3_coder` (Qwen3.5/3.6/Coder XML <function=...><parameter=...>), `llama3_json` "
        '(Llama 3.x bare {"name": ..., "parameters": {...}}), `mistral` ([TOOL_CALLS]), '
        "`gpt_oss` (harmony channels), `glm4_5` (GLM-4.5/4.6 <arg_key>/<arg_value>), "
        "`kimi_k2`, `deepseek_v3_1`, `deepseek_v3_2` (DSML), or `bracket` ([action] ... / [answer] ...). "
        "See docs/model_families.md.",
    )
    seed: int = Field(0, description="Seed used when a `tiny:` model is built from its config.")
    attn_implementation: Literal["auto", "sdpa", "eager", "flash_attention_2"] = Field(
        "auto",
        description="Attention kernel; `auto` picks flash-attn on GPU when installed, sdpa otherwise.",
    )

    lora: LoraConfig | None = Field(
        None,
        description="Train LoRA adapters instead of every weight (e.g. `lora: {rank: 16}`); "
        "the KL reference is then the base with the adapters disabled.",
    )

    @field_validator("path")
    @classmethod
    def _non_empty(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("must not be empty; use e.g. tiny:qwen3-1m or a model folder")
        return v
