"""The hf engine as the trainer drives it (`ColocatedEngine`), and its builder.

Every rank owns a private `HFEngine` holding its own copy of the weights. A use: wake (move to
the GPU; nothing on CPU), push when stale, generate, sleep (move to the CPU). The push is an
in-process copy on the calling thread, in buckets, so it is made right after each update
(`push_on_update`) and needs no probe. While a job runs, the calling thread serves the
engine's batches and the job's event loop runs in a helper thread (`HFEngine.serve_while`):
the trainer's thread stays the only one in the process doing parallel torch work (on CPU, a
second thread doing it makes OpenMP's workers sleep between operations and decoding slower).
Not here: generation itself (`mua.engines.hf.hf_engine`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, TypeVar

from mua.engines.engine_contract import ColocatedEngine, Push
from mua.engines.weight_buckets import iter_buckets

T = TypeVar("T")


class HFColocated(ColocatedEngine):
    """This rank's own `HFEngine` (or an object with its methods), pushed in `bucket_mb` buckets."""

    push_on_update = True

    def __init__(self, engine, bucket_mb: float):
        self.engine = engine
        self.bucket_mb = bucket_mb

    def run(self, job: Callable[[], Awaitable[T]], begin: Push, end: Push) -> T:
        """begin and end on the calling thread; the job's loop in a helper thread while this
        thread serves the engine (see the module docstring)."""
        try:
            asyncio.run(begin())
            return self.engine.serve_while(lambda: asyncio.run(job()))
        finally:
            asyncio.run(end())

    async def begin_use(self, push: Push | None) -> None:
        await self.engine.wake()
        if push is not None:
            await push()

    async def end_use(self, keep_base: bool) -> bool:
        await self.engine.sleep()
        return False  # the engine keeps what was pushed

    async def push_full(self, named_tensors: Iterable[tuple[str, Any]], version: str) -> None:
        # copied on the calling thread: a worker thread's copy would start an OpenMP pool
        for bucket in iter_buckets(named_tensors, self.bucket_mb):
            self.engine.load_weights(bucket)
        self.engine.load_weights([], version)  # the version moves once every bucket is in

    async def push_adapter(self, name, named_tensors, config: dict, version: str) -> None:
        self.engine.load_adapter(name, named_tensors, config, version)


def build(rollout, model_cfg, parallel, dist, policy, tokenizer) -> HFColocated:
    """A private engine for this rank, loaded from the recipe's model (float32 on CPU)."""
    from mua.determinism import engine_batch_size
    from mua.engines.hf.hf_engine import HFEngine
    from mua.models import load_model

    dtype = model_cfg.dtype if dist.device.type == "cuda" else "float32"
    engine = HFEngine(
        load_model(model_cfg.path, dtype=dtype, seed=model_cfg.seed),
        device=str(dist.device),
        copy_model=False,
        pad_token_id=tokenizer.pad_token_id or 0,
        max_batch_size=engine_batch_size(64),
    )
    return HFColocated(engine, parallel.weight_push_bucket_mb)


def standalone(recipe, path: str, tokenizer):
    """The model at `path` in this process (on the GPU when there is one)."""
    import torch

    from mua.engines.hf.hf_engine import HFEngine

    return HFEngine.from_pretrained(
        path,
        dtype=recipe.model.dtype,
        device="cuda" if torch.cuda.is_available() else "cpu",
        seed=recipe.model.seed,
        pad_token_id=tokenizer.pad_token_id or 0,
    )
