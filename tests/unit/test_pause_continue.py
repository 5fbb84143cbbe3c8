"""`mua serve` answers SGLang's /pause_generation and /continue_generation as the release it
emulates does: a paused server holds new /generate requests until continue."""

from __future__ import annotations

import asyncio

import pytest
import torch

from mua.engines.engine_contract import GenerationRequest, SamplingParams
from mua.engines.sglang.sglang_engine import SGLangEngine
from mua.errors import RunFailure
from mua.serve import serve_model

MODEL = "tiny:qwen2-1m"
torch.set_num_threads(1)


def request(rid: str) -> GenerationRequest:
    return GenerationRequest(
        prompt_ids=[5, 6, 7],
        sampling=SamplingParams(temperature=1.0, max_new_tokens=4, seed=1),
        request_id=rid,
    )


@pytest.mark.parametrize("release", ["0.5.5.post3", "0.5.23"])
def test_serve_pauses_and_continues_as_the_release_does(release):
    srv = serve_model(MODEL, sglang_release=release)
    client = SGLangEngine(srv.url)
    body = {"mode": "in_place"} if release == "0.5.23" else {}

    async def go():
        try:
            await client._call("POST", "/pause_generation", body)
            held = asyncio.ensure_future(client.generate(request("r1")))
            await asyncio.sleep(0.3)
            assert not held.done()  # a paused server holds new requests
            await client._call("POST", "/continue_generation", {})
            result = await asyncio.wait_for(held, 60)
            assert result.token_ids
            if release == "0.5.23":  # PauseGenerationReqInput(mode=...)
                with pytest.raises(RunFailure, match="pause mode"):
                    await client._call("POST", "/pause_generation", {"mode": "sideways"})
        finally:
            await client.close_connections()

    try:
        asyncio.run(go())
        calls = [c["call"] for c in srv.call_log]
        assert calls[:2] == ["pause_generation", "continue_generation"]
    finally:
        srv.stop()
