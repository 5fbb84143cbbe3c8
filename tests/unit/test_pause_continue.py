"""Pausing generation: the hf engine, `mua serve` and the SGLang client hold new requests until
continue, abort what waits, and send each covered release the body it takes."""

from __future__ import annotations

import asyncio

import pytest
import torch

from mua.engines.engine_contract import GenerationRequest, SamplingParams
from mua.engines.hf.hf_engine import HFEngine
from mua.engines.sglang.sglang_engine import SGLangEngine
from mua.errors import RunFailure, UsageError
from mua.serve import serve_model

MODEL = "tiny:qwen2-1m"
torch.set_num_threads(1)


def request(rid: str) -> GenerationRequest:
    return GenerationRequest(
        prompt_ids=[5, 6, 7],
        sampling=SamplingParams(temperature=1.0, max_new_tokens=4, seed=1),
        request_id=rid,
    )


def test_hf_engine_holds_requests_while_paused_and_aborts_waiting_ones():
    engine = HFEngine.from_pretrained(MODEL)

    async def go():
        engine.pause()
        held = asyncio.ensure_future(engine.generate(request("a")))
        dropped = asyncio.ensure_future(engine.generate(request("b")))
        await asyncio.sleep(0.3)
        assert not held.done() and not dropped.done()  # nothing admitted while paused
        assert engine.abort_waiting("b") == 1
        aborted = await dropped
        assert aborted.finish_reason == "abort" and aborted.token_ids == []
        engine.resume()
        done = await asyncio.wait_for(held, 60)
        assert done.finish_reason in ("stop", "length") and done.token_ids

    asyncio.run(go())


@pytest.mark.parametrize("release", ["0.5.5.post3", "0.5.23"])
def test_serve_pauses_and_continues_as_the_release_does(release):
    srv = serve_model(MODEL, sglang_release=release)
    client = SGLangEngine(srv.url)

    async def go():
        try:
            await client.pause_generation()
            held = asyncio.ensure_future(client.generate(request("r1")))
            await asyncio.sleep(0.3)
            assert not held.done()  # a paused server holds new requests
            await client.continue_generation()
            result = await asyncio.wait_for(held, 60)
            assert result.token_ids
            if release == "0.5.23":  # PauseGenerationReqInput(mode=...)
                await client.pause_generation("in_place")
                await client.continue_generation()
                with pytest.raises(RunFailure, match="pause mode"):
                    await client._call("POST", "/pause_generation", {"mode": "sideways"})
            else:  # no body: a pause aborts, there is no other mode
                with pytest.raises(UsageError, match="pauses by aborting only"):
                    await client.pause_generation("in_place")
            await client.abort_all()
        finally:
            await client.close_connections()

    try:
        asyncio.run(go())
        calls = [c["call"] for c in srv.call_log]
        assert calls[:2] == ["pause_generation", "continue_generation"]
        assert calls[-1] == "abort_request"
    finally:
        srv.stop()
