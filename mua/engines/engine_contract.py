"""The two contracts of a rollout engine: what rollouts call, and what the trainer calls.

`RolloutEngine` turns token ids into sampled ids with log-probs; callers issue many `generate`
calls concurrently and the engine batches what is pending. `ColocatedEngine` is one rank's engine
as the trainer uses it: begin and end of a use, full-weight and LoRA-adapter pushes carrying the
trainer's version; `EngineSync` drives it without knowing which engine it is (docs/architecture.md,
"The engine cycle"). Not here: tokenization, any engine's implementation.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TypeVar, runtime_checkable

FinishReason = Literal["stop", "length", "abort"]


@dataclass
class SamplingParams:
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0  # 0 disables
    max_new_tokens: int = 64
    stop_token_ids: list[int] = field(default_factory=list)
    seed: int | None = None


@dataclass
class GenerationRequest:
    prompt_ids: list[int]
    sampling: SamplingParams
    request_id: str = ""
    # All turns of one trajectory share a route key so a multi-engine pool sends them to the
    # same engine (prefix cache hits).
    route_key: str = ""
    # False when no later request continues this one (a conversation's last allowed turn): an
    # engine that keeps finished requests' KV for their next turn (`hf`) keeps none for it.
    keep_prefix: bool = True


@dataclass
class GenerationResult:
    token_ids: list[int]
    # log_softmax(logits / T) of each sampled token, T = the request's temperature (T = 1 when
    # greedy). The trainer recomputes exactly this, so the two agree to float precision.
    logprobs: list[float]
    finish_reason: FinishReason
    meta: dict[str, Any] = field(default_factory=dict)

    def counted(self, stats: dict, lora: str | None, version: str | None) -> GenerationResult:
        """This result, stamped with the adapter that sampled it (`lora_path`) and the weights'
        version where known, and counted in an HTTP engine's `stats` (requests, tokens)."""
        if lora is not None:
            self.meta["lora_path"] = lora
        if version is not None:
            self.meta["weight_version"] = version
        stats["requests"] += 1
        stats["tokens"] += len(self.token_ids)
        return self


@dataclass(frozen=True)
class EngineShare:
    """What an engine that reserves a fraction of each GPU declares (`memory_share` in its
    builder module): the fraction, the recipe setting that holds it, and its weights' layout."""

    fraction: float
    setting: str
    dtype: str = "bfloat16"
    tp_size: int = 1
    kv_fix: str = ""


@runtime_checkable
class RolloutEngine(Protocol):
    """What rollouts generate with: many concurrent `generate` calls from asyncio."""

    async def generate(self, request: GenerationRequest) -> GenerationResult: ...


T = TypeVar("T")
Push = Callable[[], Awaitable[None]]


class ColocatedEngine(ABC):
    """One rank's rollout engine as the trainer drives it (`mua.train.engine_sync.EngineSync`).

    Every rank holds one; `engine` is what its rollouts generate with. A use of the engine is
    `run(job, begin, end)`: `begin` calls `begin_use(push)`, which makes the engine ready and
    awaits `push()` at the point where stale weights must travel; `end` calls `end_use`, which
    gives the engine's memory back. Pushes carry the trainer's `version` (a string). All
    methods are called on every rank in the same order; which rank sends, and what it does on
    the others, is the engine's own business (collectives: the gathers inside the tensors'
    iterators run on every rank)."""

    engine: RolloutEngine
    # True: the trainer pushes right after each update; False: at the next `begin_use`
    push_on_update: bool = False
    # a prompt whose greedy continuation is compared with the trainer's log-probs after each
    # `begin_use` (every rank, collective); empty: no probe
    probe_ids: list[int] = []
    probe_tolerance: float = 0.05

    async def generate(self, request: GenerationRequest) -> GenerationResult:
        return await self.engine.generate(request)

    def run(self, job: Callable[[], Awaitable[T]], begin: Push, end: Push) -> T:
        """`await begin()`, `await job()`, `await end()` (even when the job failed), on one
        event loop in the calling thread; returns the job's result."""

        async def whole() -> T:
            await begin()
            try:
                return await job()
            finally:
                await end()

        return asyncio.run(whole())

    @abstractmethod
    async def begin_use(self, push: Push | None) -> None:
        """Make the engine ready to generate (wake it); `push`, when given (stale weights),
        must be awaited before any request is served."""

    @abstractmethod
    async def end_use(self, keep_base: bool) -> bool:
        """Give the engine's memory back to the trainer once every rank is done with it.
        `keep_base`: adapter pushes, the base weights stay. True when the pushed weights (or
        adapter) are gone and must be pushed again at the next use."""

    @abstractmethod
    async def push_full(self, named_tensors: Iterable[tuple[str, Any]], version: str) -> None:
        """Take the full weights (an iterator of (name, tensor) whose gathers are collective:
        iterate it to the end on every rank); `version` becomes the engine's."""

    @abstractmethod
    async def push_adapter(
        self, name: str, named_tensors: list[tuple[str, Any]], config: dict, version: str
    ) -> None:
        """Take a LoRA adapter (peft's file names and `adapter_config.json`) under the new
        versioned `name` and generate with it from now on, reporting `version`."""

    async def close(self) -> None:
        await self.engine.close()
