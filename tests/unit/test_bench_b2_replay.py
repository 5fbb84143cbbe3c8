"""B2's replay of a recorded run's arrivals: every request again, each conversation's in order,
the next one sent only after the previous answer, and none sent before its recorded wait."""

from __future__ import annotations

import asyncio
import time

from bench.b2_rollout import _Recording, _replay_arrivals
from mua.engines.engine_contract import GenerationRequest, GenerationResult, SamplingParams


class _Engine:
    def __init__(self) -> None:
        self.log: list[tuple[str, int, float]] = []  # (conversation, turn, seconds from start)
        self.start = time.perf_counter()

    async def generate(self, request):
        self.log.append((request.route_key, request.prompt_ids[0], time.perf_counter()))
        await asyncio.sleep(0.01)
        return GenerationResult(token_ids=[1], logprobs=[0.0], finish_reason="length")


def test_the_replay_sends_each_conversations_requests_in_order_after_their_waits():
    recording = _Recording(_Engine())

    async def record():
        recording.restart()

        async def conversation(key: str, waits: list[float]) -> None:
            for turn, wait in enumerate(waits):
                await asyncio.sleep(wait)
                req = GenerationRequest(
                    prompt_ids=[turn], sampling=SamplingParams(max_new_tokens=1), route_key=key
                )
                await recording.generate(req)

        await asyncio.gather(conversation("a", [0.0, 0.05, 0.0]), conversation("b", [0.03, 0.0]))

    asyncio.run(record())
    assert len(recording.calls) == 5
    engine = _Engine()
    asyncio.run(_replay_arrivals(engine, recording))
    by_key: dict[str, list[tuple[int, float]]] = {}
    for key, turn, at in engine.log:
        by_key.setdefault(key, []).append((turn, at))
    assert [t for t, _ in by_key["a"]] == [0, 1, 2] and [t for t, _ in by_key["b"]] == [0, 1]
    # each next request waits for the previous answer (10 ms) plus its recorded wait
    (_, a0), (_, a1), (_, a2) = by_key["a"]
    assert a1 - a0 >= 0.01 + 0.05 - 0.005 and a2 - a1 >= 0.01 - 0.005
    assert by_key["b"][0][1] - engine.start >= 0.03 - 0.005
