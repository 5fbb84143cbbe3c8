"""Deterministic mode (`MUA_DETERMINISTIC=1`): repeatable numbers from CPU runs on one machine.

Pins one thread, ATen's portable kernels, MKL's reproducible branch, oneDNN off, torch's
deterministic algorithms and one request at a time in the `hf` engine, so two CPU runs of a
recipe on the same machine and libraries agree bit for bit (docs/training.md, "Deterministic
mode"). Not here: the same numbers on another machine or on GPUs; real runs (it is slower).
"""

from __future__ import annotations

import os

ENV_VAR = "MUA_DETERMINISTIC"

PINNED_ENV = {
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "ATEN_CPU_CAPABILITY": "default",
    "MKL_CBWR": "COMPATIBLE",
    "ONEDNN_MAX_CPU_ISA": "SSE41",
}


def enabled(env: dict | None = None) -> bool:
    return (os.environ if env is None else env).get(ENV_VAR) == "1"


def child_env(env: dict | None = None) -> dict:
    """A copy of `env` (default: this process's) for a process to start; in deterministic mode
    with the variables above set (they must be set before torch loads in that process)."""
    out = dict(os.environ if env is None else env)
    if enabled(out):
        out.update(PINNED_ENV)
    return out


def apply_torch() -> None:
    """In deterministic mode, pin torch's own switches in this process (no-op otherwise)."""
    if not enabled():
        return
    import torch

    torch.set_num_threads(1)
    torch.backends.mkldnn.enabled = False
    torch.use_deterministic_algorithms(True)


def engine_batch_size(default: int) -> int:
    """Rows the `hf` engine decodes together: 1 in deterministic mode, else `default`."""
    return 1 if enabled() else default
