"""Real vLLM on CUDA through mua's vllm engine (marker `gpu`; skipped without CUDA or vLLM).

The Python of a venv with vLLM built for CUDA is named by MUA_VLLM_PYTHON (`make gpu-check`
passes it). One server is launched on GPU 0 the way a trainer's rank launches it (sleep mode,
`gpu_memory_utilization` 0.3, the ipc weight-transfer backend, LoRA enabled, float32 weights) on
a tiny Qwen3 folder, and checked against the trainer's float32 forward, |Δ log-prob| <= 1e-3:
greedy generation; a full push of another model's weights as CUDA IPC handles, then the
log-probs equal that model's and report the pushed version; sleep (level 1) frees most of the
server's share of the GPU and wake takes it back with the pushed weights intact; a LoRA adapter
push equals peft's forward. These tests have not run on a GPU yet.
"""

from __future__ import annotations

import asyncio
import os
import subprocess

import pytest

from tests.conftest import free_port

pytestmark = pytest.mark.gpu

TOL = 1e-3
SHARE = 0.3


def vllm_cuda_python() -> str:
    """MUA_VLLM_PYTHON when it imports vLLM and sees CUDA, else skip with the reason."""
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    python = os.environ.get("MUA_VLLM_PYTHON")
    if not python:
        pytest.skip("set MUA_VLLM_PYTHON to the Python of a venv with vLLM built for CUDA")
    found = subprocess.run(
        [python, "-c", "import torch, vllm; print(torch.cuda.is_available())"],
        capture_output=True,
        text=True,
    )
    if found.stdout.strip() != "True":
        pytest.skip(f"{python} cannot import vLLM with CUDA")
    return python


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    from tests.contract.vllm_side import tiny_folders

    return tiny_folders(tmp_path_factory)


@pytest.fixture(scope="module")
def engine(folders, tmp_path_factory):
    from mua.engines.vllm.settings import VLLMConfig
    from mua.engines.vllm.vllm_launch import engine_from_config

    cfg = VLLMConfig(
        python=vllm_cuda_python(),
        port=free_port(),
        gpu_memory_utilization=SHARE,
        extra_args=["--max-model-len", "1024"],
    )
    logs = tmp_path_factory.mktemp("vllm-logs")
    eng = engine_from_config(cfg, str(folders[0]), lora_rank=4, log_dir=str(logs), cuda_device=0)
    assert eng.sleep_mode and eng.transfer == "ipc"
    yield eng
    asyncio.run(eng.close())


def _cuda_weights(folder):
    from tests.contract.test_vllm_engine import _weights

    return [(name, t.to("cuda")) for name, t in _weights(folder)]


def test_greedy_logprobs_equal_the_trainer(engine, folders):
    from tests.contract.test_vllm_engine import PROMPT, _generate, _logprobs, _max_diff, _trainer

    out = _generate(engine, PROMPT)
    assert _max_diff(out.logprobs, _logprobs(_trainer(folders[0]), PROMPT, out.token_ids)) <= TOL


def test_ipc_push_then_logprobs_equal_the_pushed_model(engine, folders):
    from tests.contract.test_vllm_engine import PROMPT, _generate, _logprobs, _max_diff, _trainer

    asyncio.run(engine.push_full(_cuda_weights(folders[1]), "7"))
    out = _generate(engine, PROMPT)
    assert out.meta["weight_version"] == "7"
    assert _max_diff(out.logprobs, _logprobs(_trainer(folders[1]), PROMPT, out.token_ids)) <= TOL
    asyncio.run(engine.push_full(_cuda_weights(folders[0]), "base"))


def test_sleep_frees_the_share_and_wake_restores_it(engine):
    import torch

    from tests.contract.test_vllm_engine import PROMPT, _generate

    before = _generate(engine, PROMPT)
    free_awake, total = torch.cuda.mem_get_info(0)
    asyncio.run(engine.sleep())
    free_asleep, _ = torch.cuda.mem_get_info(0)
    asyncio.run(engine.wake(("weights",)))
    asyncio.run(engine.wake(("kv_cache",)))
    free_woken, _ = torch.cuda.mem_get_info(0)
    assert free_asleep - free_awake > SHARE * total / 2, (free_awake, free_asleep, total)
    assert free_asleep - free_woken > SHARE * total / 2, (free_asleep, free_woken, total)
    after = _generate(engine, PROMPT)
    assert after.token_ids == before.token_ids
    assert max(abs(a - b) for a, b in zip(after.logprobs, before.logprobs)) <= TOL


def test_adapter_push_equals_peft(engine, folders):
    from tests.contract.test_vllm_engine import test_adapter_push_equals_peft as on_cpu

    on_cpu(engine, folders, tol=TOL)  # the CPU check against this GPU server, at the GPU bound
