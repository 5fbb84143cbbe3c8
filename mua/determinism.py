"""Deterministic mode (`MUA_DETERMINISTIC=1`): the same numbers from a CPU run on any x86-64 machine.

Meant for tests that compare a run's numbers with stored ones (the golden GRPO run). A CPU run's
floating-point results depend on more than its inputs: on the thread count (parallel reductions
split their sums by thread), on the vector instructions of the CPU (ATen picks AVX-512, AVX2 or
plain kernels at run time, MKL and oneDNN do the same with their own), and, in the `hf` engine,
on which rows share a decoding step (the rows of one product, and the width of the attention's
padded reductions). A last-bit difference anywhere grows: AdamW divides each gradient by its own
running scale, so a tiny gradient that flips sign moves a weight by a full learning-rate step,
and later sampled tokens change.

The mode pins each of these in the processes it starts (`child_env`, before torch is imported
there) and in the process that calls `apply_torch`:

- one thread (`OMP_NUM_THREADS`, `MKL_NUM_THREADS`, `torch.set_num_threads(1)`);
- ATen's portable kernels (`ATEN_CPU_CAPABILITY=default`), whatever the CPU offers;
- MKL's conditional numerical reproducibility in its cross-CPU branch (`MKL_CBWR=COMPATIBLE`);
- oneDNN off for ATen (`torch.backends.mkldnn.enabled = False`) and limited to SSE4.1 kernels
  wherever it still runs (`ONEDNN_MAX_CPU_ISA`);
- deterministic algorithms where torch has a choice (`torch.use_deterministic_algorithms`);
- the `hf` engine decodes one request at a time (`engine_batch_size`), so how requests share a
  step never depends on when they arrived.

It is slower (no vector kernels, no batching in the engine) and not meant for real runs.
Not covered: GPUs, other C libraries (glibc's `expf` picks an FMA variant at run time; it did
not change a golden number in the measurements behind the golden test's tolerance).
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
