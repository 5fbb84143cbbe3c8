"""The `rollout.vllm` recipe section (docs/vllm.md). Imports pydantic and mua's config base only: it
is read while recipes are validated, before any engine module is imported.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, PositiveInt, model_validator

from mua.engines.server_settings import ServerEngineConfig


class VLLMConfig(ServerEngineConfig):
    """vLLM engine settings (its Python or servers, dtype); engine=vllm only. A vLLM server per
    rank (docs/vllm.md): launched from `python`, or running at `base_urls`."""

    python: str | None = Field(
        None,
        description="The Python of a venv with vLLM (it cannot share mua's: vLLM pins its own "
        "transformers); each rank launches its own server with it. `make vllm-releases` builds "
        "tests/.vllm/<release>/venv/bin/python.",
    )
    port: int = Field(
        31000, ge=1, le=65535, description="Port of rank 0's launched server (rank r: port + r)."
    )
    dtype: Literal["float32", "bfloat16", "float16"] = Field(
        "float32", description="Weight dtype inside vLLM (float32 matches the CPU trainer)."
    )
    enforce_eager: bool = Field(
        True, description="Launch without torch.compile (starts in about half the time)."
    )
    routed_experts: bool = Field(
        False,
        description="Mixture of experts: ask the server for every token's routed experts "
        "(for moe/routing_disagreement and algo.routing_replay=r3) through vLLM's "
        "token-in/token-out route; a launched server gets --enable-scale-out "
        "--enable-return-routed-experts. vLLM 0.32 returns them only on CUDA (docs/moe.md).",
    )
    kv_cache_gb: PositiveInt = Field(
        1, description="KV cache of a launched server on CPU, in GiB (VLLM_CPU_KVCACHE_SPACE)."
    )
    gpu_memory_utilization: float = Field(
        0.5,
        gt=0.0,
        lt=1.0,
        description="On CUDA: the fraction of its GPU a launched server reserves for weights and "
        "KV cache (`--gpu-memory-utilization`); the memory pre-flight counts it.",
    )
    weight_transfer: Literal["auto", "files", "ipc"] = Field(
        "auto",
        description="How full weights reach the server: `files` (safetensors in weights_dir, "
        "exact on CPU), `ipc` (CUDA IPC handles through vLLM's weight-transfer routes; a launched "
        "server on the trainer's GPU), `auto` (ipc for a launched server on CUDA, else files).",
    )
    seeds: bool = Field(
        False,
        description="Send each request's seed. Off by default: vLLM 0.31/0.32 on CPU kills its "
        "engine on a seeded request whose prefill is split over steps (under load).",
    )

    @model_validator(mode="after")
    def _ipc_needs_a_launched_server(self):
        if self.weight_transfer == "ipc" and self.base_urls:
            raise ValueError(
                "rollout.vllm.weight_transfer=ipc needs a server launched on the trainer's GPU "
                "(rollout.vllm.python); with rollout.vllm.base_urls use files or auto"
            )
        return self
