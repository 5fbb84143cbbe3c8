"""The vllm engine's CUDA paths with the server's side faked: what is sent, in which order.

The engine's HTTP call is replaced by a recorder (and CUDA IPC handles by a stand-in that names the
tensor), so these run on CPU: an IPC push sends init once, then start, one `/update_weights` per
bucket carrying names, dtypes, shapes and pickled handles, finish with the version and a prefix
cache reset; a failed update still runs the tensor iterator to its end, stops in one line and
leaves the engine refusing work; sleep mode sleeps at level 1 and wakes the weights before a push
and the KV cache after it; a CPU server sleeps and wakes not at all; the launch flags and
environment of a server on a GPU; the memory pre-flight counts vLLM's `gpu_memory_utilization`
through the engine registry and refuses a plan that cannot fit with one line naming it.
"""

from __future__ import annotations

import asyncio
import base64
import pickle
from types import SimpleNamespace

import pytest
import torch

from mua.config.rollout import RolloutConfig
from mua.engines.vllm import gpu_transfer
from mua.engines.vllm.colocated import VLLMColocated
from mua.engines.vllm.settings import VLLMConfig
from mua.engines.vllm.vllm_engine import VLLMEngine
from mua.engines.vllm.vllm_launch import ipc_pushes, launch_command, server_env
from mua.errors import RunFailure, UsageError


def _recording(engine: VLLMEngine, fail_on: str | None = None) -> list:
    sent = []

    async def call(method, path, body=None, timeout_s=None):
        sent.append((method, path, body))
        if path == fail_on:
            raise RunFailure(f"vLLM server {engine.base_url}{path} answered HTTP 500: boom")
        return {}

    engine.call = call
    return sent


@pytest.fixture
def fake_handles(monkeypatch):
    monkeypatch.setattr(gpu_transfer, "ipc_handle", lambda t: {"GPU-x": ("handle", t.numel())})


def _tensors(consumed: list, shapes=((4, 4), (8,), (2, 3))):
    for i, shape in enumerate(shapes):
        consumed.append(i)
        yield f"layer{i}.weight", torch.full(shape, float(i), dtype=torch.bfloat16)


def test_ipc_push_sends_init_once_then_start_updates_finish(fake_handles):
    engine = VLLMEngine("http://fake", transfer="ipc", bucket_mb=48 / 2**20)  # 48-byte buckets
    sent = _recording(engine)
    consumed: list = []
    asyncio.run(engine.push_full(_tensors(consumed), "3"))
    paths = [p for _, p, _ in sent]
    assert paths[:2] == ["/init_weight_transfer_engine", "/start_weight_update"]
    assert sent[0][2] == {"init_info": {"packed": False}}
    updates = [b["update_info"] for _, p, b in sent if p == "/update_weights"]
    assert len(updates) == 2  # 32 + 16 bytes fill one bucket, 12 more do not fit
    assert updates[0]["names"] == ["layer0.weight", "layer1.weight"]
    assert updates[0]["dtype_names"] == ["bfloat16", "bfloat16"]
    assert updates[0]["shapes"] == [[4, 4], [8]] and updates[1]["shapes"] == [[2, 3]]
    handles = pickle.loads(base64.b64decode(updates[1]["ipc_handles_pickled"]))
    assert handles == [{"GPU-x": ("handle", 6)}]
    assert paths[-2:] == ["/finish_weight_update", "/reset_prefix_cache"]
    assert sent[-2][2] == {"weight_version": "3"}
    assert engine.weight_version == "3" and engine.stats["pushes"] == 1

    sent.clear()
    asyncio.run(engine.push_full(_tensors([]), "4"))
    assert "/init_weight_transfer_engine" not in [p for _, p, _ in sent]


def test_a_failed_ipc_update_drains_the_iterator_stops_in_one_line_and_breaks_the_engine(
    fake_handles,
):
    engine = VLLMEngine("http://fake", transfer="ipc", bucket_mb=16 / 2**20)
    sent = _recording(engine, fail_on="/update_weights")
    consumed: list = []
    shapes = [(4, 4), (8,), (2, 3), (4,), (4,)]
    with pytest.raises(RunFailure) as err:
        asyncio.run(engine.push_full(_tensors(consumed, shapes), "5"))
    message = str(err.value)
    assert "\n" not in message and "did not take the pushed weights" in message
    assert "VLLM_ALLOW_INSECURE_SERIALIZATION" in message
    assert consumed == [0, 1, 2, 3, 4]  # every gather ran, as on the other ranks
    assert [p for _, p, _ in sent].count("/update_weights") == 1  # nothing sent after the failure
    assert "/finish_weight_update" not in [p for _, p, _ in sent]
    assert engine.weight_version is None and engine.broken
    with pytest.raises(RunFailure, match="broken by a failed push"):
        asyncio.run(engine.generate(SimpleNamespace()))
    with pytest.raises(RunFailure, match="broken by a failed push"):
        asyncio.run(engine.push_full(_tensors([]), "6"))


def test_a_refused_init_still_runs_every_gather(fake_handles):
    engine = VLLMEngine("http://fake", transfer="ipc")
    sent = _recording(engine, fail_on="/init_weight_transfer_engine")
    consumed: list = []
    with pytest.raises(RunFailure, match="did not take the pushed weights"):
        asyncio.run(engine.push_full(_tensors(consumed, [(2,)] * 5), "1"))
    assert consumed == [0, 1, 2, 3, 4] and [p for _, p, _ in sent] == [
        "/init_weight_transfer_engine"
    ]


def test_an_empty_ipc_push_fails():
    engine = VLLMEngine("http://fake", transfer="ipc")
    _recording(engine)
    with pytest.raises(RunFailure, match="no tensors"):
        asyncio.run(engine.push_full(iter(()), "1"))


def test_sleep_mode_sleeps_level_1_and_wakes_weights_before_the_push():
    engine = VLLMEngine("http://fake", sleep_mode=True)
    sent = _recording(engine)
    colocated = VLLMColocated(engine)
    assert colocated.push_on_update is False  # a sleeping server takes no push

    async def push():
        sent.append(("push", None, None))

    async def use():
        await colocated.begin_use(push)
        assert await colocated.end_use(keep_base=False) is False  # level 1 keeps the weights

    asyncio.run(use())  # a fresh server is awake: no wake
    assert [p for _, p, _ in sent] == [None, "/sleep?level=1"]
    sent.clear()
    asyncio.run(use())
    assert [p for _, p, _ in sent] == [
        "/wake_up?tags=weights",
        None,
        "/wake_up?tags=kv_cache",
        "/sleep?level=1",
    ]
    sent.clear()
    asyncio.run(engine.sleep())
    asyncio.run(engine.wake())
    asyncio.run(engine.wake())
    assert [p for _, p, _ in sent] == ["/sleep?level=1", "/wake_up"]


def test_without_sleep_mode_a_use_neither_sleeps_nor_wakes():
    engine = VLLMEngine("http://fake")
    sent = _recording(engine)
    colocated = VLLMColocated(engine)
    assert colocated.push_on_update is True
    asyncio.run(colocated.begin_use(None))
    asyncio.run(colocated.end_use(keep_base=False))
    assert sent == []


def test_a_gpu_launch_asks_for_sleep_mode_memory_share_and_ipc():
    cmd = launch_command(
        "py", "m", port=1, dtype="bfloat16", gpu_memory_utilization=0.35, ipc_transfer=True
    )
    assert cmd[cmd.index("--gpu-memory-utilization") + 1] == "0.35"
    assert "--enable-sleep-mode" in cmd
    assert cmd[cmd.index("--weight-transfer-config") + 1] == '{"backend": "ipc"}'
    cpu = launch_command("py", "m", port=1)
    assert not {
        "--enable-sleep-mode",
        "--gpu-memory-utilization",
        "--weight-transfer-config",
    } & set(cpu)


def test_a_gpu_server_sees_only_the_ranks_gpu(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,6")
    env = server_env("ext", 1, "k", cuda_device=1, ipc_transfer=True)
    assert env["CUDA_VISIBLE_DEVICES"] == "6" and env["VLLM_ALLOW_INSECURE_SERIALIZATION"] == "1"
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert server_env("ext", 1, "k", cuda_device=2)["CUDA_VISIBLE_DEVICES"] == "2"
    assert "VLLM_ALLOW_INSECURE_SERIALIZATION" not in server_env("ext", 1, "k")


def test_weight_transfer_choice():
    assert ipc_pushes(VLLMConfig(python="p"), cuda_device=0) is True
    assert ipc_pushes(VLLMConfig(python="p"), cuda_device=None) is False
    assert ipc_pushes(VLLMConfig(python="p", weight_transfer="files"), cuda_device=0) is False
    with pytest.raises(UsageError, match="needs the trainer on CUDA"):
        ipc_pushes(VLLMConfig(python="p", weight_transfer="ipc"), cuda_device=None)


def test_ipc_with_servers_elsewhere_is_refused():
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="use files or auto"):
        VLLMConfig(base_urls=["http://h:1"], weight_transfer="ipc")


def test_memory_preflight_counts_vllms_gpu_memory_utilization():
    from mua.engines.registry import engine_memory_share
    from mua.train.memory_estimate import (
        GIB,
        ModelShape,
        RunShape,
        check_fits,
        estimate_memory,
    )

    rollout = RolloutConfig(engine="vllm", vllm=VLLMConfig(python="p", gpu_memory_utilization=0.9))
    share = engine_memory_share("vllm", rollout)
    assert share.fraction == 0.9 and share.setting == "rollout.vllm.gpu_memory_utilization"
    assert engine_memory_share("hf", RolloutConfig(engine="hf")) is None
    remote = RolloutConfig(engine="vllm", vllm=VLLMConfig(base_urls=["http://h:1"]))
    assert engine_memory_share("vllm", remote) is None

    model = ModelShape(8 * 10**9, 36, 4096, 151936, 8, 128)
    run = RunShape(
        world_size=8,
        engine="vllm",
        engine_mem_fraction=share.fraction,
        engine_setting=share.setting,
        engine_kv_fix=share.setting,
    )
    est = estimate_memory(model, run, 80 * GIB)
    assert dict(est.rollout_rows)["engine (vllm): weights + KV cache"] == int(0.9 * 80 * GIB)
    with pytest.raises(RunFailure) as err:
        check_fits(est)
    assert "\n" not in str(err.value)
    assert "lower rollout.vllm.gpu_memory_utilization" in str(err.value)
    small = RunShape(
        world_size=8, engine="vllm", engine_mem_fraction=0.3, engine_setting=share.setting
    )
    check_fits(estimate_memory(model, small, 80 * GIB))
