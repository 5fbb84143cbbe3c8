"""The SGLang-protocol client against mua's own server on 127.0.0.1: generate, weight pushes
(tensor and disk paths), probe check, sleep/wake, routing, errors; plus the wire formats."""

from __future__ import annotations

import asyncio
import base64
import pickle

import pytest
import torch

from mua.engines import weight_buckets, weight_probe
from mua.engines.engine_contract import GenerationRequest, SamplingParams
from mua.engines.hf.hf_engine import HFEngine
from mua.engines.sglang import protocol, weight_sync
from mua.engines.sglang.engine_pool import EnginePool
from mua.engines.sglang.sglang_engine import SGLangEngine
from mua.errors import RunFailure
from mua.models import load_model
from mua.serve import serve_model

MODEL = "tiny:qwen2-1m"
PROMPT = [5, 6, 7, 8, 9, 10]


@pytest.fixture(scope="module")
def server_055():
    """A server emulating SGLang 0.5.5 (no weight-update sessions)."""
    srv = serve_model(MODEL, sglang_release="0.5.5.post3")
    yield srv
    srv.stop()


@pytest.fixture
def client(server):
    engine = SGLangEngine(server.url, bucket_mb=0.5)
    yield engine
    asyncio.run(engine.close())


def _sync(engine: SGLangEngine, method: str, path: str, body=None):
    """One control call of `engine`, run to its end on a loop of its own."""

    async def call():
        try:
            return await engine._call(method, path, body)
        finally:
            await engine.close_connections()

    return asyncio.run(call())


def _greedy(max_new_tokens=6, stop=()):
    return SamplingParams(temperature=0.0, max_new_tokens=max_new_tokens, stop_token_ids=list(stop))


def _perturb(model, scale=0.05, seed=1):
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=gen) * scale)


# ---- wire shapes ------------------------------------------------------------------------------


def test_generate_body_uses_sglang_field_names():
    body = protocol.generate_body(
        GenerationRequest(
            prompt_ids=[1, 2],
            request_id="r1",
            sampling=SamplingParams(temperature=0.7, top_k=0, max_new_tokens=5, stop_token_ids=[9]),
        )
    )
    assert body["input_ids"] == [1, 2] and body["rid"] == "r1" and body["return_logprob"] is True
    sp = body["sampling_params"]
    assert sp["top_k"] == -1 and sp["stop_token_ids"] == [9] and sp["max_new_tokens"] == 5
    assert protocol.sampling_from_json(sp).top_k == 0
    seeded = GenerationRequest(prompt_ids=[1], sampling=SamplingParams(seed=7))
    # a seed travels only to a server that honours it (older SGLang refuses the field)
    assert "sampling_seed" not in protocol.generate_body(seeded)["sampling_params"]
    assert protocol.generate_body(seeded, send_seed=True)["sampling_params"]["sampling_seed"] == 7
    assert protocol.generate_body(seeded, rid="r-unique")["rid"] == "r-unique"


def test_generate_bodies_built_turn_by_turn_are_the_same_bytes():
    """The client keeps each conversation's prompt JSON and serializes only what a turn added:
    the bytes sent equal `json.dumps(generate_body(...))` turn after turn, and after a prompt that
    does not extend the last one (a conversation cut short and resumed) too."""
    import json

    import numpy as np

    from mua.engines.sglang.http_bodies import PromptJSON

    prompts = PromptJSON()
    turns = [[5, 6, 7], [5, 6, 7, 8, 9], [5, 6, 7, 8, 9], [5, 6, 1], [], [np.int64(3), 4]]
    turns += [[np.int64(3), 4, 10**9], [3, 4, 10**9, 2, 2]]
    for i, ids in enumerate(turns):
        request = GenerationRequest(
            prompt_ids=list(ids),
            request_id="r",
            sampling=SamplingParams(temperature=0.5, stop_token_ids=[2], seed=i),
            route_key="g/0",
        )
        for send_seed in (False, True):
            want = json.dumps(protocol.generate_body(request, f"r-{i}", send_seed)).encode()
            got = protocol.generate_body_json(
                request, prompts.json_of("g/0", request.prompt_ids), f"r-{i}", send_seed
            )
            assert got == want, (i, send_seed)
    assert prompts.json_of("other", [1]) == "[1]" and prompts.json_of("", [1, 2]) == "[1, 2]"


def test_parses_a_real_sglang_response_without_output_ids():
    body = {
        "text": "Hi",
        "meta_info": {
            "id": "abc",
            "finish_reason": {"type": "stop", "matched": 151645},
            "prompt_tokens": 3,
            "completion_tokens": 2,
            "cached_tokens": 0,
            "output_token_logprobs": [[-0.5, 13048, None], [-0.01, 151645, None]],
        },
    }
    result = protocol.parse_generate_response(body)
    assert result.token_ids == [13048, 151645]
    assert result.logprobs == [-0.5, -0.01] and result.finish_reason == "stop"
    body["meta_info"]["finish_reason"] = {"type": "length", "length": 2}
    assert protocol.parse_generate_response(body).finish_reason == "length"
    with pytest.raises(protocol.ProtocolError):
        protocol.parse_generate_response({"text": "x"})


def test_buckets_respect_the_size_limit_and_gather_lazily():
    tensors = [(f"w{i}", torch.zeros(256)) for i in range(10)] + [("big", torch.zeros(4096))]
    pulled = []

    def source():
        for name, t in tensors:
            pulled.append(name)
            yield name, t

    buckets = weight_buckets.iter_buckets(source(), bucket_mb=3 * 1024 / 2**20)  # 3 KiB
    first = next(buckets)
    assert [n for n, _ in first] == ["w0", "w1", "w2"] and len(pulled) == 4  # w3 opened bucket 2
    rest = list(buckets)
    assert [len(b) for b in rest] == [3, 3, 1, 1] and rest[-1][0][0] == "big"
    assert all(weight_buckets.bucket_bytes(b) <= 3 * 1024 for b in [first, *rest[:-1]])


def test_tensor_encoding_round_trips_and_is_serialized_per_tp_rank(monkeypatch):
    bucket = [("a.weight", torch.randn(3, 4)), ("b.bias", torch.arange(5, dtype=torch.float32))]
    back = dict(weight_sync.decode_tensors(weight_sync.encode_tensors(bucket)))
    assert set(back) == {"a.weight", "b.bias"} and torch.equal(back["a.weight"], bucket[0][1])
    # SGLang's form: a base64 ForkingPickler dump of [(name, tensor)]
    assert pickle.loads(base64.b64decode(weight_sync.encode_tensors(bucket)))[1][0] == "b.bias"
    calls = []
    real = weight_sync.encode_tensors
    monkeypatch.setattr(weight_sync, "encode_tensors", lambda b: calls.append(b) or real(b))
    body = weight_sync.tensor_push_body(bucket, tp_size=2, flush_cache=True)
    assert len(body["serialized_named_tensors"]) == 2 and len(calls) == 2  # one per TP rank
    assert body["load_format"] is None and body["flush_cache"] is True


def test_tensor_payloads_cannot_run_code():
    class Evil:
        def __reduce__(self):
            return (print, ("pwned",))

    payload = base64.b64encode(pickle.dumps([("x", Evil())])).decode()
    with pytest.raises(ValueError, match="may not name builtins.print"):
        weight_sync.decode_tensors(payload)


def test_probe_request_ids_are_unique():
    ids = {weight_probe.probe_request_id() for _ in range(5)}
    assert len(ids) == 5
    a, b = SGLangEngine("http://127.0.0.1:9"), SGLangEngine("http://127.0.0.1:9")
    req = GenerationRequest(prompt_ids=[1], request_id="traj-1", sampling=_greedy(1))
    assert a.request_id(req) != b.request_id(req) and a.request_id(req) != a.request_id(req)


# ---- against mua serve ----------------------------------------------------------------------


def test_generate_matches_the_hf_engine(server, client):
    reference = HFEngine(load_model(MODEL))

    async def both():
        req = GenerationRequest(prompt_ids=PROMPT, sampling=_greedy(6))
        return await client.generate(req), await reference.generate(req)

    got, want = asyncio.run(both())
    assert got.token_ids == want.token_ids and got.finish_reason == want.finish_reason == "length"
    assert max(abs(a - b) for a, b in zip(got.logprobs, want.logprobs, strict=True)) < 1e-5
    # a stop token ends generation and is returned with its log-prob
    stop = want.token_ids[2]
    cut = asyncio.run(
        client.generate(GenerationRequest(prompt_ids=PROMPT, sampling=_greedy(6, [stop])))
    )
    first = want.token_ids.index(stop)
    assert cut.token_ids == want.token_ids[: first + 1] and cut.finish_reason == "stop"


def test_concurrent_requests_are_batched_by_the_server(server, client):
    before = server.engine.stats["steps"]

    async def many():
        reqs = [
            GenerationRequest(prompt_ids=PROMPT[: 3 + i % 3], sampling=_greedy(4)) for i in range(8)
        ]
        return await asyncio.gather(*(client.generate(r) for r in reqs))

    results = asyncio.run(many())
    assert all(len(r.token_ids) == 4 for r in results)
    # they share decode steps: one at a time, 8 requests x 4 tokens would take 32 steps
    assert server.engine.stats["steps"] - before < 24


def test_probe_catches_a_stale_engine_and_pushes_fix_it(server, client):
    trainer = load_model(MODEL)
    probe = weight_probe.default_probe_ids(trainer.config.vocab_size)
    asyncio.run(client.update_weights(trainer.named_parameters()))  # start in sync
    assert asyncio.run(weight_probe.check_probe(client, trainer, probe)) < 1e-4

    _perturb(trainer, seed=2)  # a training step that was not pushed
    with pytest.raises(RunFailure, match="stale or corrupted"):
        asyncio.run(weight_probe.check_probe(client, trainer, probe))

    pushes = server.counts["weight_requests"]
    buckets = client.stats["weight_buckets"]
    asyncio.run(client.update_weights(trainer.named_parameters()))  # tensor path
    assert client.stats["weight_buckets"] - buckets > 1  # 0.5 MiB buckets: several requests
    assert server.counts["weight_requests"] - pushes == client.stats["weight_buckets"] - buckets
    assert asyncio.run(weight_probe.check_probe(client, trainer, probe)) < 1e-4


def test_disk_path_push(server, tmp_path):
    trainer = load_model(MODEL)
    _perturb(trainer, seed=3)
    engine = SGLangEngine(
        server.url,
        weight_path="disk",
        bucket_mb=1.0,
        weights_dir=str(tmp_path),
        hf_config=trainer.config,
    )
    probe = weight_probe.default_probe_ids(trainer.config.vocab_size)
    assert asyncio.run(weight_probe.probe_logprob_diff(engine, trainer, probe)) > 0.05
    folder = asyncio.run(engine.update_weights_from_disk(trainer.named_parameters()))
    assert folder.parent == tmp_path and not folder.exists()  # shards removed after the load
    assert asyncio.run(weight_probe.check_probe(engine, trainer, probe)) < 1e-4
    asyncio.run(engine.close())


def test_write_shards_makes_an_index_and_reads_back(tmp_path):
    named = [(f"layer{i}.weight", torch.full((64, 64), float(i))) for i in range(4)]
    shards = weight_sync.write_shards(iter(named), tmp_path, bucket_mb=0.03)
    assert len(shards) == 4 and (tmp_path / weight_sync.SHARD_INDEX).is_file()
    back = dict(kv for bucket in weight_sync.read_shards(tmp_path) for kv in bucket)
    assert torch.equal(back["layer3.weight"], named[3][1])


def test_sleep_blocks_generation_until_wake(server, client):
    req = GenerationRequest(prompt_ids=PROMPT, sampling=_greedy(2))
    asyncio.run(client.sleep())
    assert server.released_tags == {"weights", "kv_cache", "cuda_graph"}  # 0.5.x: all three
    with pytest.raises(RuntimeError, match="asleep"):
        asyncio.run(client.generate(req))
    with pytest.raises(RunFailure, match="503.*resume_memory_occupation"):
        _sync(client, "POST", "/generate", protocol.generate_body(req))
    asyncio.run(client.wake(tags=["weights"]))  # SGLang's order: weights, push, then the rest
    assert server.released_tags == {"kv_cache", "cuda_graph"}
    asyncio.run(client.wake())
    assert server.released_tags == set()
    asyncio.run(client.wake())  # nothing released: no call (a resume would kill SGLang)
    assert len(asyncio.run(client.generate(req)).token_ids) == 2
    asyncio.run(client.flush_cache())
    assert asyncio.run(client.health())


def test_pool_keeps_a_trajectory_on_one_engine(server_055):
    server = server_055  # several engines on one server: no per-server session to share
    engines = [SGLangEngine(server.url, bucket_mb=64) for _ in range(3)]
    pool = EnginePool(engines)

    async def turns():
        for key in ("traj-a", "traj-b", "traj-c", "traj-d"):
            for _ in range(3):
                await pool.generate(
                    GenerationRequest(prompt_ids=PROMPT, sampling=_greedy(1), route_key=key)
                )

    asyncio.run(turns())
    counts = [e.stats["requests"] for e in engines]
    assert sum(counts) == 12 and all(c % 3 == 0 for c in counts)  # a trajectory's turns together
    assert pool.pick("traj-a") is pool.pick("traj-a")
    pushes = server.counts["weight_requests"]
    asyncio.run(pool.update_weights(load_model(MODEL).named_parameters()))
    assert server.counts["weight_requests"] - pushes == 3  # one bucket, sent to every engine
    asyncio.run(pool.close())


def test_errors_are_one_clear_line(server, client):
    with pytest.raises(RunFailure, match="cannot reach the SGLang server"):
        _sync(SGLangEngine("http://127.0.0.1:9", timeout_s=2), "GET", "/health")
    with pytest.raises(RunFailure, match="400.*input_ids"):
        _sync(client, "POST", "/generate", {"text": "hello"})
    with pytest.raises(RunFailure, match="404"):
        _sync(client, "GET", "/no_such_thing")
    body = {"serialized_named_tensors": ["AAAA"], "load_format": None, "flush_cache": True}
    with pytest.raises(RunFailure, match="400.*begin_weight_update"):  # 0.5.23: no session
        _sync(client, "POST", "/update_weights_from_tensor", body)
    _sync(client, "POST", "/begin_weight_update", {})
    try:
        with pytest.raises(RunFailure, match="400.*not a serialized tensor list"):
            _sync(client, "POST", "/update_weights_from_tensor", body)
    finally:
        _sync(client, "POST", "/end_weight_update", {})
    with pytest.raises(RunFailure, match="no weight named"):
        asyncio.run(client.update_weights([("not.a.weight", torch.zeros(2))]))


def test_generate_keeps_its_connections_alive_and_names_failures(server, client):
    """Every turn is one /generate: sequential turns share one kept-alive connection, concurrent
    ones one each; a server that is down or refuses the body is one clear RunFailure."""

    async def turns():
        for _ in range(4):
            await client.generate(GenerationRequest(prompt_ids=PROMPT, sampling=_greedy(2)))
        sequential = client.connections_opened
        await asyncio.gather(
            *(
                client.generate(GenerationRequest(prompt_ids=PROMPT, sampling=_greedy(2)))
                for _ in range(3)
            )
        )
        return sequential, client.connections_opened

    assert asyncio.run(turns()) == (1, 3)
    down = SGLangEngine("http://127.0.0.1:9", timeout_s=2)
    down.traits = client.traits  # skip the /get_server_info call: go straight to /generate
    request = GenerationRequest(prompt_ids=PROMPT, sampling=_greedy(2))
    with pytest.raises(RunFailure, match="cannot reach the SGLang server at http://127.0.0.1:9"):
        asyncio.run(down.generate(request))
    bad = GenerationRequest(prompt_ids=[], sampling=_greedy(2))
    with pytest.raises(RunFailure, match="/generate answered HTTP 400") as info:
        asyncio.run(client.generate(bad))
    assert info.value.status == 400
