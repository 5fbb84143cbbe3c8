"""The `model` section: which policy (and optional critic) to load and in what precision."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from mua.config.base import Section


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
    tool_parser: Literal["hermes", "bracket", "llama3_json", "auto"] = Field(
        "auto",
        description="How tool calls are read from model output: `hermes` "
        "(<tool_call>{json}</tool_call>), `bracket` ([action] ... / [answer] ...), "
        '`llama3_json` (Llama-3.x bare {"name": ..., "parameters": {...}} objects, optionally '
        "after <|python_tag|>, separated by `;` or newlines), or `auto` (hermes, else bracket).",
    )
    seed: int = Field(0, description="Seed used when a `tiny:` model is built from its config.")
    attn_implementation: Literal["auto", "sdpa", "eager", "flash_attention_2"] = Field(
        "auto",
        description="Attention kernel; `auto` picks flash-attn on GPU when installed, sdpa otherwise.",
    )

    @field_validator("path")
    @classmethod
    def _non_empty(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("must not be empty; use e.g. tiny:qwen3-1m or a model folder")
        return v
