"""The `rollout.sglang` recipe section (docs/sglang.md). Imports pydantic and mua's config base only:
it is read while recipes are validated, before any engine module is imported.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, PositiveInt

from mua.engines.server_settings import ServerEngineConfig


class SGLangConfig(ServerEngineConfig):
    """SGLang engine settings (servers, memory, weight push); engine=sglang only."""

    mem_fraction: float = Field(
        0.5, gt=0.0, lt=1.0, description="GPU memory share SGLang takes for weights and KV cache."
    )
    tp_size: PositiveInt = Field(1, description="Tensor-parallel size of each launched server.")
    port: int = Field(30000, ge=1, le=65535, description="Port of the first launched server.")
    dtype: Literal["bfloat16", "float16", "float32"] = Field(
        "bfloat16", description="Weight dtype inside SGLang."
    )
    weight_path: Literal["tensor", "disk"] = Field(
        "tensor",
        description="How weights reach the engine after each step: `tensor` (update_weights_from_tensor) "
        "or `disk` (safetensors in shared memory, then update_weights_from_disk).",
    )
    deterministic: bool = Field(
        False,
        description="Launch SGLang with --enable-deterministic-inference (SGLang >= 0.5.3) so "
        "per-request seeds are honoured; otherwise seeds are best-effort on SGLang.",
    )
