"""The real launcher under real torchrun starts a server that initializes torch.distributed as
SGLang does, and returns only once /health says the server is ready (or /get_model_info answers,
for a server without /health)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import free_port

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]


@pytest.mark.parametrize("mode", ["health", "no-health"])
def test_stand_in_server_starts_under_torchrun(mode, tmp_path):
    log = tmp_path / "standin.log"
    env = {**os.environ, "STANDIN_LOG": str(log), "PYTHONPATH": str(REPO)}
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node",
        "1",
        "--master_port",
        str(free_port()),
        str(HERE / "launch_driver.py"),
        str(free_port()),
        str(free_port()),
        mode,
    ]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    detail = proc.stdout[-2000:] + proc.stderr[-2000:] + (log.read_text() if log.exists() else "")
    assert proc.returncode == 0, detail
    want = "READY /health 200" if mode == "health" else "READY /get_model_info 200"
    assert want in proc.stdout, detail


def test_server_env_drops_torchrun_variables():
    from mua.engines.sglang.sglang_launch import server_env

    env = server_env(
        {
            "PATH": "/bin",
            "CUDA_VISIBLE_DEVICES": "0,1",
            "TORCHELASTIC_USE_AGENT_STORE": "True",
            "RANK": "1",
            "LOCAL_RANK": "1",
            "WORLD_SIZE": "2",
            "LOCAL_WORLD_SIZE": "2",
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": "29500",
            "GROUP_RANK": "0",
            "ROLE_RANK": "1",
            "TORCHELASTIC_RUN_ID": "x",
        }
    )
    assert env == {"PATH": "/bin", "CUDA_VISIBLE_DEVICES": "0,1"}
