"""Deterministic mode (`mua.determinism`) pins what it says it pins, in started processes and in
the process that applies it, and changes nothing when it is off. (What the mode cannot pin, the
CPU's math library, is why no test compares with numbers stored from another machine.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from mua import determinism


def test_child_env_pins_threads_and_kernels_only_in_the_mode():
    plain = {"PATH": "/bin", "OMP_NUM_THREADS": "4"}
    assert determinism.child_env(plain) == plain
    pinned = determinism.child_env({**plain, determinism.ENV_VAR: "1"})
    assert pinned["OMP_NUM_THREADS"] == "1" and pinned["MKL_NUM_THREADS"] == "1"
    assert pinned["ATEN_CPU_CAPABILITY"] == "default" and pinned["MKL_CBWR"] == "COMPATIBLE"
    assert pinned["PATH"] == "/bin"


def test_engine_decodes_one_request_at_a_time_only_in_the_mode(monkeypatch):
    monkeypatch.delenv(determinism.ENV_VAR, raising=False)
    assert determinism.engine_batch_size(16) == 16
    monkeypatch.setenv(determinism.ENV_VAR, "1")
    assert determinism.engine_batch_size(16) == 1


def test_apply_torch_pins_the_process():
    code = (
        "import json, torch; from mua.determinism import apply_torch; apply_torch(); "
        "print(json.dumps([torch.get_num_threads(), torch.backends.mkldnn.enabled, "
        "torch.are_deterministic_algorithms_enabled()]))"
    )
    env = determinism.child_env({**os.environ, determinism.ENV_VAR: "1", "OMP_NUM_THREADS": "2"})
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == [1, False, True]
