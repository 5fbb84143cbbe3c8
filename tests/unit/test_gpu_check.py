"""`make gpu-check` (scripts/gpu_check.py): its refusal without CUDA and its judgement of the run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import load_script

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "gpu_check.py"


def test_without_cuda_one_line_and_exit_2():
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: gpu-check would run for real")
    proc = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 2
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 1 and "no CUDA device" in lines[0], proc.stdout


def _write_run(run_dir: Path, losses: list[float], exported: bool) -> None:
    run_dir.mkdir(parents=True)
    rows = [json.dumps({"step": i + 1, "loss": v}) for i, v in enumerate(losses)]
    (run_dir / "metrics.jsonl").write_text("\n".join(rows) + "\n")
    if exported:
        (run_dir / "hf" / "final").mkdir(parents=True)
        (run_dir / "hf" / "final" / "config.json").write_text("{}")


@pytest.mark.parametrize(
    ("losses", "exported", "ok"),
    [
        ([0.5, 0.25], True, True),
        ([0.5], True, False),
        ([0.5, float("nan")], True, False),
        ([0.5, 0.25], False, False),
    ],
)
def test_train_part_needs_two_finite_losses_and_the_export(tmp_path, losses, exported, ok):
    _write_run(tmp_path / "run", losses, exported)
    passed, detail = load_script("gpu_check")._train_check(tmp_path / "run")
    assert passed is ok, detail


def test_the_vllm_part_names_why_it_cannot_run(tmp_path):
    problem = load_script("gpu_check").vllm_cuda_problem
    assert "no vLLM Python named" in problem(None)
    assert "is not an executable" in problem(str(tmp_path / "missing"))
    assert "cannot import vLLM built for CUDA" in problem(sys.executable)  # mua's: no vLLM
    cpu_vllm = ROOT / "tests" / ".vllm" / "0.32.0" / "venv" / "bin" / "python"
    if not cpu_vllm.exists():
        pytest.skip("no CPU vLLM venv (make vllm-releases) to check the CUDA test against")
    assert "cannot import vLLM built for CUDA" in problem(str(cpu_vllm))
