"""The vLLM engine as the trainer drives it (`ColocatedEngine`), and its builder.

Every rank has a vLLM server of its own (launched on `rollout.vllm.port + rank`, or its entry of
`rollout.vllm.base_urls`) and pushes to it right after each update (`push_on_update`). On CPU a use
neither sleeps nor wakes it; on CUDA `end_use` sleeps it (level 1) and `begin_use` wakes the
weights, awaits the push of stale weights, then wakes the KV cache (untested on a GPU). A mixture
of experts' fused expert tensors are pushed per expert (`mua.models.moe_layout`). Details:
docs/vllm.md. Not here: HTTP (`vllm_engine`), launching (`vllm_launch`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from mua.engines.engine_contract import ColocatedEngine, Push
from mua.engines.weight_probe import DEFAULT_PROBE_TOLERANCE
from mua.models.moe_layout import per_expert

SLEEP_NOTE = "vllm: sleep/wake do nothing on CPU; each rank's server keeps its memory between uses"


class VLLMColocated(ColocatedEngine):
    """This rank's own vLLM server, driven through its `VLLMEngine` client."""

    push_on_update = True  # False with sleep mode: a sleeping server takes no push

    def __init__(
        self,
        engine,
        probe_ids: list[int] | None = None,
        probe_tolerance: float = DEFAULT_PROBE_TOLERANCE,
        model_type: str = "",
    ):
        self.engine = engine
        self.model_type = model_type  # a mixture of experts' fused experts go per expert
        self.probe_ids = list(probe_ids or [])
        self.probe_tolerance = probe_tolerance
        self.push_on_update = not getattr(engine, "sleep_mode", False)

    async def begin_use(self, push: Push | None) -> None:
        if not getattr(self.engine, "sleep_mode", False):
            if push is not None:
                await push()
            return
        await self.engine.wake(("weights",))
        if push is not None:
            await push()
        await self.engine.wake(("kv_cache",))

    async def end_use(self, keep_base: bool) -> bool:
        await self.engine.drain()  # requests whose callers gave up (a trajectory timeout)
        await self.engine.sleep()
        return False  # the server keeps what was pushed

    async def push_full(self, named_tensors: Iterable[tuple[str, Any]], version: str) -> None:
        await self.engine.push_full(per_expert(named_tensors, self.model_type), version)

    async def push_adapter(self, name, named_tensors, config: dict, version: str) -> None:
        await self.engine.load_adapter(name, named_tensors, config, version)


def build(rollout, model_cfg, parallel, dist, policy, tokenizer) -> VLLMColocated:
    """A server for this rank (launched, or the rank's running one), and its client."""
    from mua.engines.vllm.vllm_launch import engine_from_config, served_folder
    from mua.engines.weight_probe import default_probe_ids

    lora_rank = None
    if model_cfg.lora is not None and rollout.lora_sync == "adapter":
        lora_rank = int(model_cfg.lora.rank)
    served = served_folder(model_cfg.path, model_cfg.seed, tokenizer)
    engine = engine_from_config(
        rollout.vllm,
        served,
        index=dist.rank,
        lora_rank=lora_rank,
        bucket_mb=parallel.weight_push_bucket_mb,
        max_concurrency=rollout.max_concurrency,
        cuda_device=_cuda_index(dist),
    )
    if served != model_cfg.path:
        engine.cleanup.append(served)  # a preset written as a folder: removed at close
    if dist.rank == 0 and not engine.sleep_mode:
        print(SLEEP_NOTE, flush=True)
    hf_config = getattr(policy, "config", None)
    vocab_size = int(getattr(hf_config, "vocab_size", 0) or len(tokenizer))
    return VLLMColocated(
        engine,
        probe_ids=default_probe_ids(vocab_size),
        probe_tolerance=rollout.vllm.probe_tolerance,
        model_type=str(getattr(hf_config, "model_type", "")),
    )


def standalone(recipe, path: str, tokenizer):
    """A vLLM server of its own for `path` (launched from `rollout.vllm.python`, or the first of
    `rollout.vllm.base_urls`); a `tiny:` preset is written as a folder, removed at close."""
    from mua.engines.vllm.vllm_launch import engine_from_config, served_folder

    served = served_folder(path, recipe.model.seed, tokenizer)
    engine = engine_from_config(
        recipe.rollout.vllm, served, max_concurrency=recipe.rollout.max_concurrency
    )
    if served != path:
        engine.cleanup.append(served)
    return engine


def _cuda_index(dist) -> int | None:
    """This rank's CUDA device index, or None when the trainer is not on CUDA."""
    device = getattr(dist, "device", None)
    if getattr(device, "type", None) != "cuda":
        return None
    return int(device.index if device.index is not None else getattr(dist, "local_rank", 0))
