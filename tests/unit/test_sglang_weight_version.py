"""weight_version as SGLang has it: every push carries one, the client reads the server's back,
`mua serve` moves it only when a push carries one, and a CUDA push needs the server's release.

Real HTTP on 127.0.0.1 against `mua serve` emulating a release; the facts `mua serve` follows
are checked against each release's own code in tests/contract.
"""

from __future__ import annotations

import asyncio
import copy

import pytest
import torch

from mua.engines.engine_contract import GenerationRequest, SamplingParams
from mua.engines.sglang.colocated import SGLangColocated
from mua.engines.sglang.sglang_engine import SGLangEngine, check_same_release
from mua.engines.weight_probe import default_probe_ids
from mua.errors import RunFailure
from mua.train.engine_sync import EngineSync

MODEL = "tiny:qwen2-1m"


@pytest.fixture(scope="module")
def model():
    from mua.models import load_model

    torch.set_num_threads(1)
    return load_model(MODEL, dtype="float32", seed=0)


def _serve(release: str):
    from mua.serve import serve_model

    return serve_model(MODEL, sglang_release=release)


def _generate_version(engine: SGLangEngine) -> str | None:
    request = GenerationRequest(
        prompt_ids=[5, 6, 7], sampling=SamplingParams(temperature=0.0, max_new_tokens=2)
    )
    return asyncio.run(engine.generate(request)).meta.get("weight_version")


def test_every_push_carries_the_update_count_and_the_engine_reads_it_back(model):
    server = _serve("0.5.23")
    try:
        engine = SGLangEngine(server.url, bucket_mb=1)  # several buckets: version on the last
        probe_ids = default_probe_ids(model.config.vocab_size)
        sync = EngineSync(SGLangColocated(engine, probe_ids=probe_ids), copy.deepcopy(model))
        assert server.weight_version == "default"  # a fresh SGLang server's version
        asyncio.run(sync.begin())
        assert engine.weight_version == server.weight_version == "0"  # the initial weights
        assert _generate_version(engine) == "0"
        asyncio.run(sync.end())
        sync.push_weights()  # an update
        asyncio.run(sync.begin())
        assert engine.weight_version == _generate_version(engine) == "1"
        asyncio.run(sync.end())
        asyncio.run(sync.begin())  # a re-push of the same weights after a release: same version
        assert engine.weight_version == "1"
        asyncio.run(sync.close())
    finally:
        server.stop()


def test_the_disk_path_carries_the_version_too(model):
    server = _serve("0.5.5.post3")
    try:
        engine = SGLangEngine(server.url, weight_path="disk", bucket_mb=64)
        asyncio.run(engine.update_weights(model.named_parameters(), weight_version="7"))
        assert engine.weight_version == server.weight_version == "7"
        asyncio.run(engine.close())
    finally:
        server.stop()


def test_mua_serve_keeps_its_version_when_a_push_carries_none(model):
    server = _serve("0.5.23")
    try:
        engine = SGLangEngine(server.url, bucket_mb=64)
        asyncio.run(engine.update_weights(model.named_parameters()))
        assert server.weight_version == engine.weight_version == "default"
        assert _generate_version(engine) == "default"
        asyncio.run(engine.close())
    finally:
        server.stop()


def test_a_release_without_versions_is_sent_none_and_reports_none(model):
    server = _serve("0.4.9.post6")
    try:
        engine = SGLangEngine(server.url, bucket_mb=64)
        asyncio.run(engine.update_weights(model.named_parameters(), weight_version="3"))
        assert engine.weight_version is None
        assert _generate_version(engine) is None
        assert "weight_version" not in server.info()
        asyncio.run(engine.close())
    finally:
        server.stop()


def test_a_server_that_ignores_the_version_fails_the_push(model):
    from dataclasses import replace

    server = _serve("0.5.23")
    server.traits = replace(server.traits, weight_version=False)  # drops the field, as 0.4.x
    try:
        engine = SGLangEngine(server.url, bucket_mb=64)  # believes the server takes versions
        with pytest.raises(RunFailure, match="weight_version"):
            asyncio.run(engine.update_weights(model.named_parameters(), weight_version="2"))
        asyncio.run(engine.close())
    finally:
        server.stop()


class _CudaLike:
    """Stands for a CUDA tensor: the release check runs before anything is encoded."""

    is_cuda = True


def test_a_cuda_push_to_another_release_is_refused_in_one_line():
    server = _serve("0.5.23")
    try:
        engine = SGLangEngine(server.url, bucket_mb=64)
        with pytest.raises(RunFailure) as err:
            asyncio.run(engine.push_tensor_bucket([("w", _CudaLike())], flush_cache=True))
        message = str(err.value)
        assert "\n" not in message and "0.5.23" in message and "weight_path=disk" in message
        assert server.counts["weight_requests"] == 0  # nothing was sent
        asyncio.run(engine.close())
    finally:
        server.stop()


def test_the_release_check_passes_only_the_same_release():
    check_same_release("0.5.23", "0.5.23", "http://x")
    for trainer in ("0.5.5.post3", None):
        with pytest.raises(RunFailure, match="sglang==0.5.23"):
            check_same_release(trainer, "0.5.23", "http://x")
