"""EngineSync in one process: the sglang co-location cycle (leader and follower), the lazy push of
the hf flow, the probe, the memory pre-flight, and the launcher's check for a launched server."""

from __future__ import annotations

import asyncio
import copy
from pathlib import Path

import pytest
import torch

from mua.engines.hf.colocated import HFColocated
from mua.engines.hf.hf_engine import HFEngine
from mua.engines.sglang.colocated import SGLangColocated
from mua.engines.weight_probe import default_probe_ids
from mua.errors import RunFailure
from mua.train.engine_sync import EngineSync, memory_preflight
from mua.train.step_timer import StepTimer

MODEL = "tiny:qwen2-1m"
REPO = Path(__file__).resolve().parents[2]


class RecordingEngine:
    """Records what the trainer asks of the engine; generates with a real hf engine."""

    def __init__(self, model):
        self.inner = HFEngine(model, copy_model=True)
        self.calls: list[tuple] = []
        self.versions: list[str | None] = []  # the weight_version each sglang push carried

    async def generate(self, request):
        self.calls.append(("generate",))
        return await self.inner.generate(request)

    async def update_weights(self, named_tensors, weight_version=None) -> None:
        tensors = [t for bucket in named_tensors for t in _pairs(bucket)]
        self.calls.append(("push", len(tensors)))
        self.versions.append(weight_version)
        await self.inner.update_weights(tensors)

    def load_weights(self, bucket, weight_version=None) -> None:  # the hf flow's push
        self.calls.append(("push", len(bucket)))
        self.inner.load_weights(bucket, weight_version)

    def serve_while(self, fn, first=None):
        return self.inner.serve_while(fn, first)

    async def wake(self, tags=None) -> None:
        self.calls.append(("wake", tuple(tags or ())))

    async def sleep(self, tags=None) -> None:
        self.calls.append(("sleep", tuple(tags or ())))

    async def drain(self) -> None:
        self.calls.append(("drain",))

    async def close(self) -> None:
        await self.inner.close()


def _pairs(item):
    """A bucket (list of pairs, hf flow) or a single pair (sglang flow: the client buckets)."""
    return item if isinstance(item, list) else [item]


@pytest.fixture(scope="module")
def model():
    from mua.models import load_model

    torch.set_num_threads(1)
    return load_model(MODEL, dtype="float32", seed=0)


def _sync(model, engine, kind="sglang", is_leader=True, probe_tolerance=0.05, **kwargs):
    if kind == "hf":
        return EngineSync(HFColocated(engine, bucket_mb=1), model, **kwargs)
    probe_ids = default_probe_ids(model.config.vocab_size)
    session = SGLangColocated(engine, is_leader, probe_ids, probe_tolerance)
    return EngineSync(session, model, **kwargs)


def test_leader_resumes_pushes_probes_then_releases(model):
    num_params = len(list(model.named_parameters()))
    engine = RecordingEngine(copy.deepcopy(model))
    sync = _sync(model, engine)
    sync.timer = timer = StepTimer()
    asyncio.run(sync.begin())
    assert engine.calls == [
        ("wake", ("weights",)),  # the engine resumes it only if it released it
        ("push", num_params),
        ("wake", ()),  # every other released tag
        ("generate",),  # the probe, once the KV cache is back
    ]
    assert not sync.stale
    engine.calls.clear()
    asyncio.run(sync.end())
    assert engine.calls == [("drain",), ("sleep", ())]  # all of the release's tags
    assert sync.stale  # released weights are gone on SGLang: push again on the next wake
    metrics = sync.take_metrics()
    assert metrics["engine/probe_logp_diff"] < 1e-5 and timer.metrics()["time/weight_push_s"] > 0
    assert sync.take_metrics() == {}  # taken once


def test_follower_only_generates(model):
    engine = RecordingEngine(copy.deepcopy(model))
    sync = _sync(model, engine, is_leader=False)
    asyncio.run(sync.begin())
    asyncio.run(sync.end())
    assert engine.calls == [("generate",), ("drain",)]  # the leader pushes and releases


def test_hf_flow_pushes_only_stale_weights(model):
    trainer_model = copy.deepcopy(model)
    engine = RecordingEngine(copy.deepcopy(model))
    sync = _sync(trainer_model, engine, kind="hf")

    async def job():
        return None

    def cycle():
        sync.run(job)
        pushes = [c for c in engine.calls if c[0] == "push"]
        engine.calls.clear()
        return len(pushes)

    assert cycle() > 0  # stale at start
    assert cycle() == 0  # nothing changed
    with torch.no_grad():
        next(trainer_model.parameters()).add_(0.5)
    sync.mark_stale()
    assert cycle() > 0
    first = next(engine.inner.model.parameters())
    assert torch.equal(first, next(trainer_model.parameters()))


def test_push_weights_copies_to_hf_now_and_to_sglang_at_its_next_wake(model):
    trainer_model = copy.deepcopy(model)
    with torch.no_grad():
        next(trainer_model.parameters()).add_(0.25)

    hf_engine = RecordingEngine(copy.deepcopy(model))
    hf = _sync(trainer_model, hf_engine, kind="hf")
    hf.push_weights()  # the step's push: the hf engine holds the update before any rollout
    assert [c[0] for c in hf_engine.calls] == ["push"] * len(hf_engine.calls) != []
    assert torch.equal(next(hf_engine.inner.model.parameters()), next(trainer_model.parameters()))

    sg_engine = RecordingEngine(copy.deepcopy(model))
    sg = _sync(trainer_model, sg_engine, stale=False)
    sg.push_weights()
    assert sg_engine.calls == []  # its weight memory is released: nothing to push into yet
    asyncio.run(sg.begin())
    names = [c[0] for c in sg_engine.calls]
    assert names.index("push") < names.index("generate")  # pushed before the probe generates
    asyncio.run(sg.end())


def test_probe_stops_a_stale_engine(model):
    from mua.models import load_model

    other = load_model(MODEL, dtype="float32", seed=1)
    engine = RecordingEngine(other)

    async def ignore(named_tensors, weight_version=None):
        return None

    engine.update_weights = ignore
    sync = _sync(model, engine, probe_tolerance=0.05)
    with pytest.raises(RunFailure, match="weight sync check failed"):
        asyncio.run(sync.begin())


def _recipe(**overrides):
    from mua.config import load_recipe

    args = [f"{k}={v}" for k, v in overrides.items()]
    return load_recipe(str(REPO / "recipes" / "quickstart.yaml"), args, verb="train")


def test_memory_preflight_prints_the_table_and_refuses_a_small_gpu(model, capsys):
    recipe = _recipe(**{"rollout.engine": "sglang"})
    table = memory_preflight(recipe, model, world_size=1, gpu_bytes=80 * 2**30)
    assert "memory estimate" in capsys.readouterr().out and table.splitlines()[-1] == "fits"
    with pytest.raises(RunFailure, match="not enough GPU memory"):
        memory_preflight(recipe, model, world_size=1, gpu_bytes=2**30, show=False)


def test_launching_sglang_without_it_installed_is_one_line(mua_cli, tmp_path):
    from mua.engines.sglang.sglang_engine import sglang_version
    from tests.integration.grpo_helpers import write_guess_tasks, write_rl_recipe

    if sglang_version() is not None:
        pytest.skip("SGLang is installed here")
    train, _ = write_guess_tasks(tmp_path, num_train=4, num_test=0)
    recipe = write_rl_recipe(tmp_path, Path(MODEL), train, rollout={"engine": "sglang"})
    code, _, err = mua_cli("train", str(recipe))
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and "rollout.sglang.base_urls" in lines[0], err


# ---- against mua serve: the calls a real SGLang server would get --------------------------------


@pytest.fixture
def served():
    from mua.serve import serve_model

    srv = serve_model(MODEL)
    yield srv
    srv.stop()


def test_first_wake_on_a_fresh_server_resumes_nothing(model, served):
    from mua.engines.sglang.sglang_engine import SGLangEngine

    engine = SGLangEngine(served.url, bucket_mb=64)
    sync = _sync(model, engine)
    asyncio.run(sync.begin())  # a fresh server holds all its memory: nothing to resume
    asyncio.run(sync.end())
    asyncio.run(sync.begin())
    calls = [(c["call"], tuple(c.get("tags") or ())) for c in served.call_log]
    assert calls == [
        ("begin_weight_update", ()),
        ("update_weights_from_tensor", ()),
        ("end_weight_update", ()),
        ("release_memory_occupation", ("kv_cache", "weights", "cuda_graph")),
        ("resume_memory_occupation", ("weights",)),
        ("begin_weight_update", ()),
        ("update_weights_from_tensor", ()),
        ("end_weight_update", ()),
        ("resume_memory_occupation", ("cuda_graph", "kv_cache")),
    ]
    asyncio.run(engine.close())


def test_sleep_after_an_abandoned_request_drains_it_first(model, served):
    """A trajectory that timed out leaves its request running on the server; the release must
    wait for it (SGLang 0.5.x asserts it is idle), not fail or crash the scheduler."""
    from mua.engines.engine_contract import GenerationRequest, SamplingParams
    from mua.engines.sglang.sglang_engine import SGLangEngine

    engine = SGLangEngine(served.url, bucket_mb=64)
    sync = _sync(model, engine)
    asyncio.run(sync.begin())

    async def abandon():
        request = GenerationRequest(
            prompt_ids=[5, 6, 7], sampling=SamplingParams(temperature=0.0, max_new_tokens=60)
        )
        task = asyncio.create_task(engine.generate(request))
        while not served._running:  # the server runs it
            await asyncio.sleep(0.005)
        task.cancel()
        await sync.end()

    asyncio.run(abandon())
    assert served.released_tags == {"weights", "kv_cache", "cuda_graph"}
    assert any(c["call"] == "abort_request" for c in served.call_log)
    asyncio.run(engine.close())
