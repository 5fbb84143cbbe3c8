"""The SGLang engine as the trainer drives it (`ColocatedEngine`), and its builder.

One rank leads a server that several ranks share (global rank 0 with `rollout.sglang.base_urls`,
else each node's local rank 0, which launches it): it resumes weight memory, pushes (every rank
gathers), resumes the other tags; after the rollouts every rank drains its requests and the leader
releases every tag (docs/sglang.md, "Servers: connected or launched"). A fresh server has released
nothing; released weights must be pushed again; pushes wait for the next use (`push_on_update`
False). Not here: the HTTP protocol and launching (`sglang_engine`, `sglang_launch`, `engine_pool`).
"""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import Iterable
from typing import Any

from mua.distributed import all_gather_objects, barrier
from mua.engines.engine_contract import ColocatedEngine, Push
from mua.engines.sglang.lora_endpoints import refuse_release
from mua.engines.sglang.releases import ReleaseTraits
from mua.engines.sglang.sglang_engine import SGLangEngine
from mua.engines.sglang.weight_push import sglang_version
from mua.engines.weight_probe import DEFAULT_PROBE_TOLERANCE
from mua.errors import RunFailure, UsageError


class SGLangColocated(ColocatedEngine):
    """A client of the servers (an `SGLangEngine` or `EnginePool`); `is_leader` drives them."""

    def __init__(
        self,
        engine,
        is_leader: bool = True,
        probe_ids: list[int] | None = None,
        probe_tolerance: float = DEFAULT_PROBE_TOLERANCE,
    ):
        self.engine = engine
        self.is_leader = is_leader
        self.probe_ids = list(probe_ids or [])
        self.probe_tolerance = probe_tolerance

    async def begin_use(self, push: Push | None) -> None:
        if self.is_leader:
            await self.engine.wake(tags=["weights"])  # only when released
        if push is not None:
            await push()
        if self.is_leader:
            await self.engine.wake()  # every other tag it released
        barrier()  # followers generate only once the leader's push and resume are done

    async def end_use(self, keep_base: bool) -> bool:
        await self.engine.drain()  # SGLang 0.5.x asserts it is idle when memory is released
        barrier()
        if self.is_leader:  # every tag of the server's release (cuda_graph included)
            await self.engine.sleep(tags=await self._released_tags(keep_base))
        return True  # SGLang frees released weights; an adapter is pushed again too

    async def _released_tags(self, keep_base: bool) -> list[str] | None:
        if not keep_base:
            return None
        engines = getattr(self.engine, "engines", [self.engine])
        traits = await engines[0].server_traits()
        return [t for t in traits.memory_tags if t != "weights"]

    async def push_full(self, named_tensors: Iterable[tuple[str, Any]], version: str) -> None:
        if not self.is_leader:
            for _ in named_tensors:  # take part in each gather; the leader sends
                pass
            return
        await self.engine.update_weights(named_tensors, weight_version=version)  # it buckets

    async def push_adapter(self, name, named_tensors, config: dict, version: str) -> None:
        if self.is_leader:
            await self.engine.load_adapter(name, named_tensors, config, version)
        else:  # the leader loaded it (the barrier in `begin_use` orders it before any request)
            self.engine.use_adapter(name, version)

    async def close(self) -> None:
        """Leave a shared server as a fresh one is: the leader resumes what it released, so the
        next trainer that attaches (whose first wake resumes nothing) finds its memory there."""
        if self.is_leader:
            try:
                await self.engine.wake()
            except Exception:  # the server is gone (or was launched here and stops below)
                pass
        await self.engine.close()


def build(rollout, model_cfg, parallel, dist, policy, tokenizer) -> SGLangColocated:
    """Connect to `rollout.sglang.base_urls`, or launch one server per node (collective)."""
    from mua.engines.sglang.engine_pool import engine_from_config
    from mua.engines.weight_probe import default_probe_ids

    cfg = rollout.sglang
    hf_config = getattr(policy, "config", None)
    options = dict(
        bucket_mb=parallel.weight_push_bucket_mb,
        hf_config=hf_config,
        max_concurrency=rollout.max_concurrency,
    )
    if model_cfg.lora is not None and rollout.lora_sync == "adapter":
        from mua.engines.sglang.lora_endpoints import launch_args

        options["lora_args"] = launch_args(model_cfg.lora)  # a launched server takes adapters
    if getattr(hf_config, "num_experts_per_tok", None) and (
        cfg.base_urls or ReleaseTraits.of(sglang_version()).routed_experts
    ):
        options["routed_experts"] = True  # a mixture of experts: every token's experts
    if cfg.base_urls:  # servers of the whole job: global rank 0 drives them
        engine = engine_from_config(cfg, model_cfg.path, **options)
        is_leader = dist.rank == 0
    else:  # one launched server per node, driven by the node's local rank 0
        is_leader = dist.local_rank == 0
        engine = engine_from_config(cfg, model_cfg.path, **options) if is_leader else None
        node = _node_id()
        # the node's other ranks connect with the server's address and key
        launched = (engine.base_url, engine.api_key) if engine is not None else None
        shared = all_gather_objects((node, launched))
        if engine is None:
            url, key = next(found for n, found in shared if n == node and found)
            engine = engine_from_config(
                cfg.model_copy(update={"base_urls": [url]}), model_cfg.path, api_key=key, **options
            )
    vocab_size = int(getattr(hf_config, "vocab_size", 0) or len(tokenizer))
    return SGLangColocated(
        engine,
        is_leader=is_leader,
        probe_ids=default_probe_ids(vocab_size),
        probe_tolerance=cfg.probe_tolerance,
    )


def _node_id() -> str:
    """Which node this process runs on: torchrun's node rank, else the host name."""
    return os.environ.get("GROUP_RANK") or socket.gethostname()


def check_launch(recipe) -> None:
    """One line before torchrun starts: a server to launch needs SGLang installed and a CUDA GPU;
    `rollout.lora_sync=adapter` needs a release that takes adapters."""
    _check_server(recipe.rollout.sglang)
    _check_adapter_sync(recipe)
    _check_routed_experts(recipe)


def _check_server(cfg) -> None:
    if cfg.base_urls:
        return
    if sglang_version() is None:
        raise UsageError(
            "rollout.engine=sglang without rollout.sglang.base_urls launches SGLang, which is "
            "not installed; install it on a CUDA machine, or give rollout.sglang.base_urls "
            "(e.g. a `mua serve` address)"
        )
    import torch

    if not torch.cuda.is_available():
        raise UsageError(
            "rollout.engine=sglang without rollout.sglang.base_urls launches an SGLang server, "
            "which needs a CUDA GPU and this machine has none; run on a GPU host, use "
            "rollout.engine=hf, or give rollout.sglang.base_urls (e.g. a `mua serve` address)"
        )


def _check_adapter_sync(recipe) -> None:
    """Before the run: `rollout.lora_sync=adapter` only where the engine can take an adapter."""
    rollout = recipe.rollout
    if rollout.lora_sync != "adapter":
        return
    if not rollout.sglang.base_urls:
        refuse_release(sglang_version(), "the installed sglang")
        return
    for url in rollout.sglang.base_urls:
        version = server_version(url)
        if version is not None:
            refuse_release(version, f"the server at {url}")


def _check_routed_experts(recipe) -> None:
    """Before the run: `algo.routing_replay=r3` only where SGLang returns the routed experts."""
    if getattr(recipe.algo, "routing_replay", "off") != "r3":
        return
    urls = recipe.rollout.sglang.base_urls
    found = [(u, server_version(u)) for u in urls] or [(None, sglang_version())]
    for url, version in found:
        if url is not None and version is None:
            continue  # not answering yet: its generate calls will say so
        if not ReleaseTraits.of(version).routed_experts:
            where = f"the server at {url}" if url else "the installed sglang"
            raise UsageError(
                f"algo.routing_replay=r3 needs SGLang >= 0.5.23, which returns each token's "
                f"routed experts; {where} runs {version}; upgrade SGLang or set "
                "algo.routing_replay=off"
            )


def server_version(url: str) -> str | None:
    """The release a server reports (`/get_server_info`), or None when it does not answer; asked
    through the SGLang client (`SGLangEngine.server_info`, mua's one HTTP stack)."""

    async def ask() -> str | None:
        client = SGLangEngine(url, timeout_s=10)
        try:
            info = await client.server_info()
        except RunFailure:
            return None
        finally:
            await client.close_connections()
        return info.get("version")

    return asyncio.run(ask())
