"""The RolloutEngine contract every engine implements (hf, sglang, openai, remote servers).

An engine turns token ids into sampled token ids with their log-probs. Callers issue many
`generate` calls concurrently from asyncio; the engine batches whatever is pending. Weights
arrive through `update_weights` (named full tensors, in buckets); `sleep`/`wake` release and
restore memory when the engine shares GPUs with the trainer. No tokenization happens here.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

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


@runtime_checkable
class RolloutEngine(Protocol):
    async def generate(self, request: GenerationRequest) -> GenerationResult: ...

    async def update_weights(self, named_tensors: Iterable[tuple[str, Any]]) -> None: ...

    async def sleep(self) -> None: ...

    async def wake(self) -> None: ...

    async def close(self) -> None: ...
