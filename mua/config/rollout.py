"""Sections for rollouts: which gym, which simulated user, how the policy is sampled.

The LLM user's endpoint settings, and those of the API agent (`rollout.openai`), are one model
(`mua.config.endpoint.EndpointConfig`). Secrets are never stored here: `api_key_env` names an
environment variable.
"""

from __future__ import annotations

import os
from typing import Literal

from pydantic import (
    Field,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    field_validator,
    model_validator,
)

from mua.config.base import Section
from mua.config.endpoint import EndpointConfig
from mua.errors import UsageError


class ServerEngineConfig(Section):
    """What every engine that runs as HTTP servers next to the trainer shares (SGLang, vLLM):
    where pushed weights are written, the post-push probe, and the launch and request timeouts."""

    weights_dir: str | None = Field(
        None, description="Folder for weights pushed through files; default /dev/shm (RAM-backed)."
    )
    probe_tolerance: PositiveFloat = Field(
        0.05,
        description="Most mean |log-prob| difference between engine and trainer on the probe "
        "prompt after a push before the run stops.",
    )
    launch_timeout_s: PositiveFloat = Field(
        900.0, description="Wait for a launched server to answer."
    )
    request_timeout_s: PositiveFloat = Field(600.0, description="Timeout of one HTTP request.")
    extra_args: list[str] = Field(
        default_factory=list, description="More flags of the server's launcher, passed verbatim."
    )
    api_key_env: str | None = Field(
        None,
        description="Environment variable holding the API key of the servers at `base_urls` "
        "(those started with `--api-key`), sent with every request; a server mua launches gets "
        "a key of its own.",
    )

    def base_urls_key(self) -> str | None:
        """The key of the servers at `base_urls`: the value of `api_key_env` (None when unset)."""
        if self.api_key_env is None:
            return None
        key = os.environ.get(self.api_key_env)
        if not key:
            raise UsageError(
                f"api_key_env names {self.api_key_env}, which is not set: export it with the "
                "servers' API key, or drop api_key_env for servers started without one"
            )
        return key


class SGLangConfig(ServerEngineConfig):
    base_urls: list[str] = Field(
        default_factory=list,
        description="Running servers speaking SGLang's protocol (SGLang or `mua serve`); empty: "
        "launch one SGLang server per node on the trainer's GPUs.",
    )
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


class VLLMConfig(ServerEngineConfig):
    """A vLLM server per rank (docs/vllm.md): launched from `python`, or running at `base_urls`."""

    python: str | None = Field(
        None,
        description="The Python of a venv with vLLM (it cannot share mua's: vLLM pins its own "
        "transformers); each rank launches its own server with it. `make vllm-releases` builds "
        "tests/.vllm/<release>/venv/bin/python.",
    )
    base_urls: list[str] = Field(
        default_factory=list,
        description="Running vLLM servers, one per rank (rank r uses the r-th), started with the "
        "flags and environment of docs/vllm.md; empty: launch them from `python`.",
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


class RetryConfig(Section):
    """Retries of conversations the environment failed (docs/training.md): one that ends
    `user_failure`, `env_error` or `timeout` is run again in a fresh env with new seeds."""

    max: NonNegativeInt = Field(
        0,
        description="Most retries of one conversation the environment failed (its user, gym or "
        "time budget), each in a fresh env with seeds derived from (seed, attempt); 0: no "
        "retries, the failed conversation is masked from the loss.",
    )
    on_exhausted: Literal["drop_group", "mask_member"] = Field(
        "drop_group",
        description="Training, when a conversation still fails after `max` retries: "
        "`drop_group` (its group is not trained) or `mask_member` (the group is trained, that "
        "conversation masked). Evaluation and `mua rollout` keep it as a failure. Unused while "
        "`max` is 0.",
    )


class RolloutConfig(Section):
    engine: str = Field(
        "hf",
        description="Generation engine: `hf` (transformers, CPU/GPU), `sglang` (GPU), `vllm` "
        "(a vLLM server per rank, CPU/GPU), "
        "`openai` (any OpenAI-compatible server; evaluation only), or another engine "
        "registered in `mua.engines.registry`.",
    )
    n: PositiveInt = Field(4, description="Samples per task (the GRPO group size).")
    temperature: float = Field(1.0, ge=0.0, description="Sampling temperature.")
    top_p: float = Field(1.0, gt=0.0, le=1.0, description="Nucleus sampling mass.")
    top_k: int = Field(0, ge=0, description="Top-k sampling; 0 disables.")
    max_new_tokens_per_turn: PositiveInt = Field(
        64, description="Most new tokens per assistant turn."
    )
    max_total_tokens: PositiveInt = Field(1024, description="Most tokens in one trajectory.")
    context_window: PositiveInt | None = Field(
        None,
        description="Most tokens the policy is shown when it generates a turn: the last N of "
        "the conversation so far (MuTIS's rolling context, 4096). The trajectory and its "
        "training sample keep every token. Unset: the whole conversation.",
    )
    max_turns: PositiveInt = Field(8, description="Most assistant turns per trajectory.")
    trajectory_timeout_s: PositiveFloat = Field(
        600.0,
        description="Wall time per trajectory, not counting time waiting on LLM endpoints (the "
        "user, a judge, an API agent), which are bounded by their own timeout and retries.",
    )
    call_timeout_s: PositiveFloat = Field(
        60.0,
        description="Timeout of one env call (reset, step: tools, scripted users), not counting "
        "time waiting on the LLM user, a judge or an API agent (see their `timeout_s`).",
    )
    max_concurrency: PositiveInt = Field(64, description="Most trajectories in flight at once.")
    oversample: float = Field(
        1.0,
        ge=1.0,
        description="Partial rollouts (training only, docs/async_rl.md): a step keeps "
        "ceil(oversample × groups) groups in flight, trains on the first complete ones and "
        "carries the others into the next step; 1.0: every step waits for all its groups.",
    )
    retries: RetryConfig = Field(
        default_factory=lambda: RetryConfig(),
        description="Retries of conversations the environment failed (`user_failure`, "
        "`env_error`, `timeout`): `{max: N, on_exhausted: drop_group | mask_member}`; off by "
        "default.",
    )
    drift: Literal["drop", "per_turn"] = Field(
        "drop",
        description="When re-rendering the finished conversation differs from the sampled tokens: "
        "drop the trajectory, or fall back to one training sample per assistant turn.",
    )
    intervention_style: Literal["chat", "raw"] = Field(
        "chat", description="How env-injected messages (e.g. math interventions) are added."
    )
    openai: EndpointConfig = Field(
        default_factory=EndpointConfig,
        description="The API agent's endpoint; engine=openai only (the served model's name is "
        "model.path).",
    )
    lora_sync: Literal["merged", "adapter"] = Field(
        "merged",
        description="How a LoRA policy (model.lora) reaches the engine after each update: "
        "`merged` (the adapters merged into the gathered weights while pushing; every engine, "
        "pushes stay bucketed) or `adapter` (the engine keeps the base and receives only the "
        "adapter, under a versioned name; hf, or SGLang >= 0.5.8).",
    )
    sglang: SGLangConfig = Field(
        default_factory=lambda: SGLangConfig(),
        description="SGLang engine settings (servers, memory, weight push); engine=sglang only.",
    )
    vllm: VLLMConfig = Field(
        default_factory=lambda: VLLMConfig(),
        description="vLLM engine settings (its Python or servers, dtype); engine=vllm only.",
    )

    @field_validator("engine")
    @classmethod
    def _known_engine(cls, v: str) -> str:
        from mua.engines.registry import list_engines

        known = [*list_engines(), "openai"]
        if v not in known:
            raise ValueError(f"unknown engine {v!r}; use one of: {', '.join(sorted(known))}")
        return v

    @field_validator("max_total_tokens")
    @classmethod
    def _total_vs_turn(cls, v: int, info) -> int:
        per_turn = info.data.get("max_new_tokens_per_turn")
        if per_turn is not None and v < per_turn:
            raise ValueError(
                f"must be at least rollout.max_new_tokens_per_turn ({per_turn}); raise it or "
                "lower the per-turn budget"
            )
        return v

    @model_validator(mode="after")
    def _vllm_has_a_server(self):
        if self.engine == "vllm" and not (self.vllm.python or self.vllm.base_urls):
            raise ValueError(
                "rollout.engine=vllm needs rollout.vllm.python (the Python of a venv with vLLM, "
                "e.g. tests/.vllm/0.32.0/venv/bin/python from `make vllm-releases`) or "
                "rollout.vllm.base_urls (running servers)"
            )
        return self
