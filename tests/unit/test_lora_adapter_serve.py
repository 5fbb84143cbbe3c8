"""`rollout.lora_sync: adapter` through SGLang's protocol against `mua serve` (real HTTP on
127.0.0.1): the trainer's EngineSync pushes only the adapter under a versioned name, the probe
(engine log-probs against the trainer's peft forward) passes, greedy outputs equal a merged push
of the same weights, a follower rank names the leader's adapter, old versions are unloaded, the
base weights are never pushed nor released, every result reports the adapter that sampled it and
the trainer's weight_version of it (the server's own version stays the base's); releases without the endpoint are refused."""

from __future__ import annotations

import asyncio

import pytest
import torch

from mua.config.model import LoraConfig
from mua.engines.engine_contract import GenerationRequest, SamplingParams
from mua.errors import UsageError

MODEL = "tiny:qwen2-1m"
PROMPTS = [[5, 6, 7, 8], [11, 12, 13], [40, 41, 42, 43, 44, 45]]


def _policy(seed: int):
    from mua.models import load_model
    from mua.models.lora import add_adapters

    model = add_adapters(load_model(MODEL, seed=0), LoraConfig(rank=4, alpha=8))
    _randomize(model, seed)
    return model


def _randomize(model, seed: int) -> None:
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if ".lora_B." in name:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.3)


async def _greedy(engine) -> list:
    return await asyncio.gather(
        *(
            engine.generate(
                GenerationRequest(
                    prompt_ids=p, sampling=SamplingParams(temperature=0.0, max_new_tokens=10)
                )
            )
            for p in PROMPTS
        )
    )


def _merged_outputs(policy) -> list:
    from mua.engines.hf.hf_engine import HFEngine
    from mua.models import load_model
    from mua.models.lora import lora_scalings, merged_params

    engine = HFEngine(load_model(MODEL, seed=0), copy_model=False)
    engine.load_weights(merged_params(policy.named_parameters(), lora_scalings(policy)))
    return asyncio.run(_greedy(engine))


def _same(a, b) -> None:
    for x, y in zip(a, b, strict=True):
        assert x.token_ids == y.token_ids
        assert max(abs(p - q) for p, q in zip(x.logprobs, y.logprobs, strict=True)) < 1e-4


def _versions_are(results, adapter: str, version: str) -> None:
    """Each result names the adapter that sampled it and the trainer's version of it."""
    for result in results:
        assert result.meta["lora_path"] == adapter
        assert result.meta["weight_version"] == version


@pytest.mark.parametrize("release", ["0.5.23", "0.5.12"])  # per-rank payloads, one payload
def test_adapter_sync_against_mua_serve(release):
    from mua.engines.sglang.colocated import SGLangColocated
    from mua.engines.sglang.sglang_engine import SGLangEngine
    from mua.engines.weight_probe import default_probe_ids
    from mua.serve import serve_model
    from mua.train.engine_sync import EngineSync

    torch.set_num_threads(1)
    policy = _policy(1)
    server = serve_model(MODEL, sglang_release=release)
    try:
        probe = default_probe_ids(policy.config.vocab_size)
        leader, follower = (
            EngineSync(
                SGLangColocated(
                    SGLangEngine(server.url), is_leader=lead, probe_ids=probe, probe_tolerance=1e-3
                ),
                policy,
                lora_sync="adapter",
            )
            for lead in (True, False)
        )

        async def cycle() -> tuple[list, list]:
            await leader.begin()  # pushes the adapter, then probes it against the trainer
            await follower.begin()
            got = await _greedy(leader.engine), await _greedy(follower.engine)
            await follower.end()
            await leader.end()
            return got

        lead_out, follow_out = asyncio.run(cycle())
        _same(_merged_outputs(policy), lead_out)
        _same(lead_out, follow_out)
        assert leader.engine.adapters.live == follower.engine.adapters.live == "mua-lora-0"
        _versions_are(lead_out + follow_out, "mua-lora-0", "0")
        assert leader.engine.weight_version == follower.engine.weight_version == "0"

        _randomize(policy, 2)  # an update
        leader.push_weights(), follower.push_weights()
        lead_out, _ = asyncio.run(cycle())
        _same(_merged_outputs(policy), lead_out)
        assert leader.engine.adapters.live == "mua-lora-1"
        _versions_are(lead_out, "mua-lora-1", "1")
        assert leader.engine.weight_version == follower.engine.weight_version == "1"
        assert server.weight_version == "default"  # as SGLang: an adapter load has no version
        for sync in (leader, follower):
            asyncio.run(sync.close())
        calls = [c["call"] for c in server.call_log]
        tags = [c.get("tags") for c in server.call_log if c["call"] == "release_memory_occupation"]
    finally:
        server.stop()
    assert calls.count("load_lora_adapter_from_tensors") == 2
    assert calls.count("unload_lora_adapter") == 1  # version 0, once version 1 was live
    assert not any(c.startswith("update_weights") for c in calls)  # the base never travels
    assert tags and all("weights" not in t for t in tags)  # and stays resident
    assert server.lora.registered == ["mua-lora-1"]


def test_releases_without_the_endpoint_refuse_adapter_sync():
    from mua.config.recipes import TrainRecipe
    from mua.engines.sglang.sglang_engine import SGLangEngine
    from mua.serve import serve_model
    from mua.train.launcher import _check_rl_inputs

    server = serve_model(MODEL, sglang_release="0.5.5.post3")
    try:
        recipe = TrainRecipe(
            model={"path": MODEL, "lora": {"rank": 4}},
            rollout={
                "engine": "sglang",
                "lora_sync": "adapter",
                "sglang": {"base_urls": [server.url]},
            },
        )
        with pytest.raises(UsageError, match=r"needs SGLang >= 0\.5\.8.*runs 0\.5\.5\.post3"):
            _check_rl_inputs(recipe)  # the launcher asks the engine's check_launch hook
        with pytest.raises(UsageError, match="lora_sync=merged"):
            asyncio.run(SGLangEngine(server.url).load_adapter("x", [], {}))
        assert "load_lora_adapter_from_tensors" not in str(server.call_log)
    finally:
        server.stop()
    with pytest.raises(ValueError, match="model.lora is not set"):
        TrainRecipe(rollout={"lora_sync": "adapter"})


def test_mua_serve_refuses_requests_that_do_not_name_a_loaded_adapter():
    from mua.engines.sglang.sglang_engine import SGLangEngine
    from mua.errors import RunFailure
    from mua.models.lora import adapter_config_dict, adapter_file_names
    from mua.serve import serve_model

    policy = _policy(1)
    server = serve_model(MODEL)
    try:
        engine = SGLangEngine(server.url)
        named = list(adapter_file_names(policy.named_parameters()))

        async def run():
            await engine.load_adapter("a", named, adapter_config_dict(policy))
            engine.adapters.live = None  # a client that forgets to name it
            with pytest.raises(RunFailure, match="name one in lora_path"):
                await _greedy(engine)
            engine.adapters.live = "nope"
            with pytest.raises(RunFailure, match="'nope' is not loaded"):
                await _greedy(engine)
            await engine.close()

        asyncio.run(run())
    finally:
        server.stop()


def _hold(engine, delta: int) -> None:
    """Hold the hf engine's admission (+1) as a weight load does, or let it go (-1)."""
    with engine._queue_lock:
        engine._holds += delta
    engine._start_serving()


def test_a_request_in_flight_keeps_its_adapter_while_a_newer_one_is_loaded():
    """The protocol's promise: an old version stays until no request in flight names it. The
    engine is held with requests naming version 0 admitted, version 1 is loaded and a
    request naming it arrives; then the old requests finish with version 0, the new one with
    version 1, and version 0 is unloaded only after its requests answered."""
    from mua.engines.sglang.sglang_engine import SGLangEngine
    from mua.models.lora import adapter_config_dict, adapter_file_names
    from mua.serve import serve_model

    torch.set_num_threads(1)
    first, second = _policy(1), _policy(2)
    server = serve_model(MODEL)
    gate = server.lora.gate

    def adapter(policy):
        return list(adapter_file_names(policy.named_parameters())), adapter_config_dict(policy)

    async def until(condition) -> None:
        for _ in range(2000):
            if condition():
                return
            await asyncio.sleep(0.005)
        raise AssertionError("the server never got there")

    async def run():
        engine = SGLangEngine(server.url)
        await engine.load_adapter("mua-lora-0", *adapter(first), weight_version="0")
        _hold(server.engine, +1)  # requests get in, none is sampled yet
        old = asyncio.ensure_future(_greedy(engine))
        await until(lambda: gate.running["mua-lora-0"] == len(PROMPTS))
        await engine.load_adapter("mua-lora-1", *adapter(second), weight_version="1")
        new = asyncio.ensure_future(_greedy(engine))
        await until(lambda: gate.waiting["mua-lora-1"] == len(PROMPTS))
        assert server.lora.registered == ["mua-lora-0", "mua-lora-1"] and not old.done()
        _hold(server.engine, -1)
        got = await old, await new
        await engine.close()
        return got

    try:
        old_out, new_out = asyncio.run(run())
        calls = [c["call"] for c in server.call_log]
        registered = list(server.lora.registered)
    finally:
        server.stop()
    _same(_merged_outputs(first), old_out)
    _same(_merged_outputs(second), new_out)
    _versions_are(old_out, "mua-lora-0", "0")
    _versions_are(new_out, "mua-lora-1", "1")
    assert calls.count("unload_lora_adapter") == 1 and registered == ["mua-lora-1"]


def test_chat_runs_on_the_base_model_while_adapters_are_loaded():
    """The chat endpoint (a simulated user's backend) names no adapter: it is answered by the
    base model even right after requests sampled with an adapter."""
    import json
    import urllib.request

    from mua.engines.sglang.sglang_engine import SGLangEngine
    from mua.models.lora import adapter_config_dict, adapter_file_names
    from mua.serve import serve_model

    torch.set_num_threads(1)
    policy = _policy(1)
    server = serve_model(MODEL)

    def chat() -> str:
        body = {"messages": [{"role": "user", "content": "Hello"}], "max_tokens": 8}
        request = urllib.request.Request(
            server.url + "/v1/chat/completions",
            data=json.dumps({**body, "temperature": 0}).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=60) as reply:
            return json.loads(reply.read())["choices"][0]["message"]["content"]

    async def adapted(engine):
        named = list(adapter_file_names(policy.named_parameters()))
        await engine.load_adapter("mua-lora-0", named, adapter_config_dict(policy), "0")
        return await _greedy(engine)

    try:
        before = chat()
        engine = SGLangEngine(server.url)
        with_adapter = asyncio.run(adapted(engine))
        assert server.lora.gate.active == "mua-lora-0"
        after = chat()
        assert server.lora.gate.active is None
    finally:
        server.stop()
    assert after == before
    _same(_merged_outputs(policy), with_adapter)
