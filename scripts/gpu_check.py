"""`make gpu-check`: what a GPU host must pass before a real run, in one command, under 10 minutes.

Four parts, each with its own time limit, run in this order and reported in one table:

1. the GPU tests (`pytest tests/gpu`: real SGLang and the transformers engine on CUDA);
1b. the vLLM GPU tests (`tests/gpu/test_vllm_gpu.py`: generation log-probs against the trainer,
   a CUDA IPC push then log-probs equal to the trainer's, sleep/wake freeing and restoring memory,
   an adapter push), with the Python of `--vllm-python` (default $MUA_VLLM_PYTHON); skipped with
   one line when that Python cannot import vLLM with CUDA;
2. benchmark B6 (training tokens/s of a Qwen3-0.6B-shaped model, bf16, packed micro-batches);
3. a two-step GRPO run of a small Qwen3-architecture model (`tiny:qwen3-30m`) with `mua train`
   under torchrun + FSDP2 on NCCL, one rank per GPU, bf16 compute, the transformers engine, on the
   built-in `guess` gym; it passes when both steps logged a finite loss and the run exported its
   final Hugging Face folder.

It does not install anything (install with `pip install -e ".[gpu]"` first) and does not judge
speed beyond B6's own bar. Without CUDA it stops at once with one line (exit 2).
Usage: `python scripts/gpu_check.py [--out DIR] [--vllm-python PATH]` (default: runs/gpu_check).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LIMITS_S = {"gpu tests": 300, "vllm gpu tests": 300, "B6": 150, "two-step bf16 GRPO": 240}
VLLM_TESTS = "tests/gpu/test_vllm_gpu.py"


def _cuda_devices() -> int:
    try:
        import torch
    except ImportError:
        return 0
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def vllm_cuda_problem(python: str | None) -> str | None:
    """Why the vLLM part cannot run with `python` (one line), or None when it imports vLLM and
    sees CUDA."""
    if not python:
        return "no vLLM Python named (--vllm-python or MUA_VLLM_PYTHON)"
    if not (os.path.isfile(python) and os.access(python, os.X_OK)):
        return f"{python} is not an executable"
    try:
        found = subprocess.run(
            [python, "-c", "import torch, vllm; print(torch.cuda.is_available())"],
            capture_output=True,
            text=True,
            timeout=120,
        )
    except subprocess.TimeoutExpired:
        return f"{python} did not import vLLM within 120 s"
    if found.stdout.strip() != "True":
        return f"{python} cannot import vLLM built for CUDA"
    return None


def _run(name: str, cmd: list[str], log: Path, env=None) -> tuple[bool, float, str]:
    """Run one part with its time limit; (passed, seconds, one-line detail)."""
    start = time.monotonic()
    with log.open("w") as out:
        try:
            proc = subprocess.run(
                cmd,
                cwd=ROOT,
                stdout=out,
                stderr=subprocess.STDOUT,
                timeout=LIMITS_S[name],
                env=env,
            )
        except subprocess.TimeoutExpired:
            return False, time.monotonic() - start, f"over its {LIMITS_S[name]} s limit; see {log}"
    seconds = time.monotonic() - start
    tail = log.read_text(errors="replace").strip().splitlines()
    detail = tail[-1] if tail else ""
    return proc.returncode == 0, seconds, detail


def _train_check(run_dir: Path) -> tuple[bool, str]:
    """Both steps logged a finite loss and the final export exists."""
    metrics_file = run_dir / "metrics.jsonl"
    if not metrics_file.exists():
        return False, f"no {metrics_file}"
    rows = [json.loads(line) for line in metrics_file.read_text().splitlines() if line.strip()]
    losses = [r.get("loss") for r in rows if "loss" in r]
    if len(losses) < 2 or not all(isinstance(v, float) and math.isfinite(v) for v in losses):
        return False, f"expected 2 finite losses in {metrics_file}, got {losses}"
    if not (run_dir / "hf" / "final" / "config.json").exists():
        return False, f"no final export in {run_dir / 'hf' / 'final'}"
    return True, f"losses {', '.join(f'{v:.4g}' for v in losses)}; exported hf/final"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="runs/gpu_check", help="where logs and the run go")
    parser.add_argument(
        "--vllm-python",
        default=os.environ.get("MUA_VLLM_PYTHON"),
        help="the Python of a venv with vLLM built for CUDA (default $MUA_VLLM_PYTHON)",
    )
    args = parser.parse_args(argv)
    gpus = _cuda_devices()
    if not gpus:
        print("gpu-check: no CUDA device here; run it on a GPU host after pip install -e '.[gpu]'")
        return 2
    out = (ROOT / args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    python = sys.executable
    mua = [python, "-m", "mua.cli.main"]
    run_dir = out / "train"
    data_dir = out / "data"
    subprocess.run(
        [*mua, "prep", "--gym", "guess", "--option", "max_number=8", "--out", str(data_dir)],
        cwd=ROOT,
        check=True,
        stdout=subprocess.DEVNULL,
    )
    train_cmd = [
        *mua,
        "train",
        "recipes/quickstart.yaml",
        "model.path=tiny:qwen3-30m",
        f"data.train_files=[{data_dir / 'train.parquet'}]",
        f"data.test_files=[{data_dir / 'test.parquet'}]",
        "total_steps=2",
        "rollout.engine=hf",
        "parallel.mixed_precision=bf16",
        "checkpoint.save_freq=0",
        f"run_dir={run_dir}",
        "--nproc-per-node",
        str(gpus),
    ]
    parts = {
        "gpu tests": [python, "-m", "pytest", "-q", "-m", "gpu", "tests/gpu", "--ignore"]
        + [VLLM_TESTS],
        "vllm gpu tests": [python, "-m", "pytest", "-q", "-m", "gpu", VLLM_TESTS],
        "B6": [python, "-m", "bench", "B6"],
        "two-step bf16 GRPO": train_cmd,
    }
    print(f"gpu-check: {gpus} CUDA device(s); logs in {out}", flush=True)
    results = []
    vllm_problem = vllm_cuda_problem(args.vllm_python)
    for name, cmd in parts.items():
        if name == "vllm gpu tests" and vllm_problem:
            print(f"  {name:<20} skip  {vllm_problem}", flush=True)
            continue
        env = {**os.environ, "MUA_VLLM_PYTHON": args.vllm_python or ""}
        passed, seconds, detail = _run(name, cmd, out / f"{name.replace(' ', '_')}.log", env)
        if name == "two-step bf16 GRPO" and passed:
            passed, detail = _train_check(run_dir)
        results.append((name, passed, seconds, detail))
        print(
            f"  {name:<20} {'ok' if passed else 'FAIL':<5} {seconds:6.1f} s  {detail}", flush=True
        )
    failed = [name for name, passed, _, _ in results if not passed]
    print("gpu-check: " + ("all parts passed" if not failed else f"failed: {', '.join(failed)}"))
    return 0 if not failed else 1


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    sys.exit(main(sys.argv[1:]))
