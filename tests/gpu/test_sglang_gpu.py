"""Real SGLang and the transformers engine on CUDA (marker `gpu`; skipped without a GPU/SGLang).

A tiny model is saved as a Hugging Face folder and served by `python -m sglang.launch_server`
through mua's launcher; the same client code as the CPU tests then checks greedy parity with the
transformers engine, log-prob agreement after a weight push, and that sleep frees GPU memory.
The smoke test runs under torchrun, in order: `mua train rollout.engine=sglang` launching its own
server (ready on /health), then `sglang_smoke.py` (first wake on a fresh server, tensor push
through the trainer's gather path and the probe with tp 1 and 2, ranks sharing one server probing
at once, a seeded generate twice, the disk path as a control, the sglang version recorded).
These tests have not run on a GPU yet.
"""

from __future__ import annotations

import asyncio
import socket

import pytest

pytestmark = pytest.mark.gpu


def _cuda_and_sglang() -> int:
    """The number of GPUs, or skip: these tests need CUDA and SGLang."""
    import torch

    from mua.engines.sglang.sglang_engine import sglang_version

    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    if sglang_version() is None:
        pytest.skip("sglang is not installed (pip install 'mua[gpu]')")
    return torch.cuda.device_count()


MODEL = "tiny:qwen2-1m"
PROMPT = [5, 6, 7, 8, 9, 10, 11, 12]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _greedy(n: int):
    from mua.engines.engine_contract import SamplingParams

    return SamplingParams(temperature=0.0, max_new_tokens=n)


@pytest.fixture(scope="module")
def sglang_engine(tmp_path_factory):
    from mua.engines.sglang.sglang_engine import sglang_version
    from mua.engines.sglang.sglang_launch import launch_sglang_server
    from mua.models import load_model, load_tokenizer, save_hf

    _cuda_and_sglang()
    if sglang_version() is None:
        pytest.skip("sglang is not installed (pip install 'mua[gpu]')")
    folder = tmp_path_factory.mktemp("tiny_hf")
    save_hf(load_model(MODEL), load_tokenizer(MODEL), folder, dtype="float32")
    engine = launch_sglang_server(
        str(folder),
        port=_free_port(),
        mem_fraction=0.3,
        dtype="float32",
        extra_args=["--attention-backend", "triton", "--disable-cuda-graph"],
        log_path=str(folder.parent / "sglang.log"),
        launch_timeout_s=600,
        bucket_mb=1.0,
    )
    yield engine
    asyncio.run(engine.close())


def test_greedy_generation_matches_the_transformers_engine(sglang_engine):
    from mua.engines.engine_contract import GenerationRequest
    from mua.engines.hf.hf_engine import HFEngine
    from mua.models import load_model

    reference = HFEngine(load_model(MODEL), device="cuda")
    req = GenerationRequest(prompt_ids=PROMPT, sampling=_greedy(8))
    got = asyncio.run(sglang_engine.generate(req))
    want = asyncio.run(reference.generate(req))
    assert got.token_ids == want.token_ids
    assert max(abs(a - b) for a, b in zip(got.logprobs, want.logprobs, strict=True)) <= 0.02


def test_logprobs_agree_after_a_tensor_push(sglang_engine):
    import torch

    from mua.engines import weight_probe
    from mua.models import load_model

    trainer = load_model(MODEL).cuda()
    with torch.no_grad():
        for p in trainer.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    probe = weight_probe.default_probe_ids(trainer.config.vocab_size)
    assert asyncio.run(weight_probe.probe_logprob_diff(sglang_engine, trainer, probe)) > 0.02
    asyncio.run(sglang_engine.update_weights(trainer.named_parameters()))
    assert (
        asyncio.run(weight_probe.check_probe(sglang_engine, trainer, probe, tolerance=0.02)) <= 0.02
    )


def test_sleep_releases_gpu_memory(sglang_engine):
    import torch

    free_awake, total = torch.cuda.mem_get_info()
    asyncio.run(sglang_engine.sleep())
    free_asleep, _ = torch.cuda.mem_get_info()
    asyncio.run(sglang_engine.wake())
    # the engine held 30% of the GPU; most of it must come back while asleep
    assert free_asleep - free_awake > 0.15 * total
    from mua.engines.engine_contract import GenerationRequest

    assert asyncio.run(
        sglang_engine.generate(GenerationRequest(prompt_ids=PROMPT, sampling=_greedy(2)))
    ).token_ids


def test_hf_engine_on_cuda_matches_cpu():
    from mua.engines.engine_contract import GenerationRequest
    from mua.engines.hf.hf_engine import HFEngine
    from mua.models import load_model

    req = GenerationRequest(prompt_ids=PROMPT, sampling=_greedy(8))
    cpu = asyncio.run(HFEngine(load_model(MODEL), device="cpu").generate(req))
    gpu_engine = HFEngine(load_model(MODEL), device="cuda")
    gpu = asyncio.run(gpu_engine.generate(req))
    assert gpu.token_ids == cpu.token_ids
    assert max(abs(a - b) for a, b in zip(gpu.logprobs, cpu.logprobs, strict=True)) < 1e-3
    asyncio.run(gpu_engine.sleep())
    assert next(gpu_engine.model.parameters()).device.type == "cpu"
    asyncio.run(gpu_engine.wake())
    assert next(gpu_engine.model.parameters()).device.type == "cuda"


def test_torchrun_smoke_colocated_sglang(tmp_path):
    import json
    import subprocess
    import sys
    from pathlib import Path

    from mua.models import load_model, load_tokenizer, save_hf
    from tests.integration.grpo_helpers import write_guess_tasks, write_rl_recipe
    from tests.integration.train_helpers import metric_history, run_train

    gpus = _cuda_and_sglang()
    folder = save_hf(load_model(MODEL), load_tokenizer(MODEL), tmp_path / "tiny_hf")
    # 1. `mua train` launches its own server (local rank 0), waits for /health, trains a step
    train, _ = write_guess_tasks(tmp_path, num_train=4, num_test=0)
    recipe = write_rl_recipe(tmp_path, Path(folder), train, rollout={"engine": "sglang"})
    res = run_train(
        recipe,
        "total_steps=1",
        "rollout.sglang.mem_fraction=0.25",
        "rollout.sglang.dtype=float32",
        "rollout.sglang.extra_args=[--attention-backend,triton,--disable-cuda-graph]",
        "rollout.sglang.port=" + str(_free_port()),
    )
    assert res.returncode == 0, res.stderr[-3000:]
    assert metric_history(tmp_path / "run", "engine/probe_logp_diff")[0] < 0.02
    # 2.-6. the co-location cycle under torchrun, tp 1 and (with 2 GPUs) tp 2
    nproc = min(gpus, 2)
    out = tmp_path / "smoke.json"
    smoke = Path(__file__).with_name("sglang_smoke.py")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(nproc)]
    cmd += ["--master_port", str(_free_port()), str(smoke), str(out), str(folder)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads(out.read_text())
    print(json.dumps(report))  # the sglang version and what each server did, for the record
    assert [r["tp"] for r in report["runs"]] == ([1, 2] if nproc == 2 else [1])
    for run in report["runs"]:
        assert all(d < 0.02 for d in run["probe_diffs"]), run
        if run["seeds_honoured"]:
            assert run["seeded_equal"], run
