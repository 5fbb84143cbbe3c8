"""Several SGLang servers behind one engine, and the engine a recipe's `rollout.sglang` names.

`EnginePool` spreads trajectories over several `SGLangEngine`s and keeps all turns of one
trajectory (one `route_key`) on the same engine, where its prefix is cached; weight pushes,
memory calls and adapters go to every engine. `engine_from_config` connects to
`rollout.sglang.base_urls` (one engine, or a pool) or launches one server on this node
(`mua.engines.sglang.sglang_launch`). Not here: the HTTP protocol of one server
(`mua.engines.sglang.sglang_engine`).
"""

from __future__ import annotations

import asyncio
import shutil
import zlib
from collections.abc import Iterable, Sequence
from itertools import count
from typing import Any

from mua.engines import weight_buckets
from mua.engines.engine_contract import GenerationRequest, GenerationResult
from mua.engines.sglang import weight_sync
from mua.engines.sglang.sglang_engine import SGLangEngine


class EnginePool:
    """Several engines behind one RolloutEngine; one trajectory's turns stay on one engine."""

    def __init__(self, engines: Sequence[SGLangEngine]):
        if not engines:
            raise ValueError("EnginePool needs at least one engine")
        self.engines = list(engines)
        self._round_robin = count()

    def pick(self, route_key: str) -> SGLangEngine:
        if route_key:
            return self.engines[zlib.crc32(route_key.encode()) % len(self.engines)]
        return self.engines[next(self._round_robin) % len(self.engines)]

    async def generate(self, request: GenerationRequest) -> GenerationResult:
        return await self.pick(request.route_key).generate(request)

    @property
    def weight_version(self) -> str | None:
        """The servers' weight version when they all report the same one, else None."""
        versions = {e.weight_version for e in self.engines}
        return versions.pop() if len(versions) == 1 else None

    async def update_weights(
        self, named_tensors: Iterable[tuple[str, Any]], weight_version: str | None = None
    ) -> None:
        """Gather each bucket once and send it to every engine concurrently."""
        if all(e.weight_path == "disk" for e in self.engines):
            folder = weight_sync.new_weights_dir(self.engines[0].weights_dir)
            try:
                await asyncio.to_thread(
                    weight_sync.write_shards,
                    named_tensors,
                    folder,
                    self.engines[0].bucket_mb,
                    self.engines[0].hf_config,
                )
                await asyncio.gather(
                    *(e.load_weights_from_folder(folder, weight_version) for e in self.engines)
                )
            finally:
                shutil.rmtree(folder, ignore_errors=True)
            return
        await asyncio.gather(*(e.begin_weight_update() for e in self.engines))
        try:
            buckets = weight_buckets.iter_buckets(named_tensors, self.engines[0].bucket_mb)
            current = next(buckets, None)
            while current is not None:
                following = next(buckets, None)
                version = weight_version if following is None else None
                await asyncio.gather(
                    *(
                        e.push_tensor_bucket(current, following is None, version)
                        for e in self.engines
                    )
                )
                current = following
        finally:
            await asyncio.gather(*(e.end_weight_update() for e in self.engines))
        await asyncio.gather(*(e.read_weight_version(weight_version) for e in self.engines))

    async def load_adapter(
        self, name: str, named_tensors, config: dict, weight_version: str | None = None
    ) -> None:
        named = list(named_tensors)
        await asyncio.gather(
            *(e.load_adapter(name, named, config, weight_version) for e in self.engines)
        )

    def use_adapter(self, name: str, weight_version: str | None = None) -> None:
        for engine in self.engines:
            engine.use_adapter(name, weight_version)

    async def drain(self, timeout_s: float | None = None) -> None:
        await asyncio.gather(*(e.drain(timeout_s) for e in self.engines))

    async def sleep(self, tags: Sequence[str] | None = None) -> None:
        await asyncio.gather(*(e.sleep(tags) for e in self.engines))

    async def wake(self, tags: Sequence[str] | None = None) -> None:
        await asyncio.gather(*(e.wake(tags) for e in self.engines))

    async def close(self) -> None:
        await asyncio.gather(*(e.close() for e in self.engines))


def engine_from_config(
    sglang_cfg,
    model_path: str,
    *,
    bucket_mb: float = 256.0,
    hf_config: Any = None,
    max_concurrency: int = 64,
    lora_args: Sequence[str] = (),
    api_key: str | None = None,
    routed_experts: bool = False,
):
    """The rollout engine a recipe's `rollout.sglang` section describes (`lora_args`: the
    launch flags of `rollout.lora_sync=adapter`, `lora_endpoints.launch_args`).

    `bucket_mb` is the recipe's `parallel.weight_push_bucket_mb`.
    With `base_urls` set, connect to those servers (a pool when there are several), sending
    `api_key` (the key of a server a rank of this node launched), else the key named by
    `api_key_env`; otherwise launch one SGLang
    server for `model_path` on this node, with a key of its own. `routed_experts`: ask for
    every token's experts (a mixture of experts; a launched server records them).
    """
    common = dict(
        weight_path=sglang_cfg.weight_path,
        bucket_mb=bucket_mb,
        timeout_s=sglang_cfg.request_timeout_s,
        max_concurrency=max_concurrency,
        weights_dir=sglang_cfg.weights_dir,
        hf_config=hf_config,
        routed_experts=routed_experts,
    )
    if sglang_cfg.base_urls:
        key = api_key or sglang_cfg.base_urls_key()
        engines = [
            SGLangEngine(url, tp_size=sglang_cfg.tp_size, api_key=key, **common)
            for url in sglang_cfg.base_urls
        ]
        return engines[0] if len(engines) == 1 else EnginePool(engines)
    from mua.engines.sglang.sglang_launch import launch_sglang_server

    return launch_sglang_server(
        model_path,
        port=sglang_cfg.port,
        mem_fraction=sglang_cfg.mem_fraction,
        tp_size=sglang_cfg.tp_size,
        dtype=sglang_cfg.dtype,
        deterministic=sglang_cfg.deterministic,
        extra_args=[
            *lora_args,
            *(["--enable-return-routed-experts"] if routed_experts else []),
            *sglang_cfg.extra_args,
        ],
        launch_timeout_s=sglang_cfg.launch_timeout_s,
        **common,
    )
