"""Deterministic mode (`MUA_DETERMINISTIC=1`): repeatable numbers from CPU runs on one machine.

What it promises: two CPU runs of the same recipe on the same machine, with the same installed
libraries, give the same numbers whatever the thread settings, the load or the order in which
requests reach the `hf` engine. What it does not promise: the same numbers on another machine.
A CPU run's floating-point results depend on more than its inputs, and the mode pins only some
of those dependencies:

- one thread (`OMP_NUM_THREADS`, `MKL_NUM_THREADS`, `torch.set_num_threads(1)`): parallel
  reductions no longer split their sums by thread;
- ATen's portable kernels (`ATEN_CPU_CAPABILITY=default`), whatever the CPU offers;
- MKL's conditional numerical reproducibility in its cross-CPU branch (`MKL_CBWR=COMPATIBLE`);
- oneDNN off for ATen (`torch.backends.mkldnn.enabled = False`) and limited to SSE4.1 kernels
  wherever it still runs (`ONEDNN_MAX_CPU_ISA`);
- deterministic algorithms where torch has a choice (`torch.use_deterministic_algorithms`);
- the `hf` engine decodes one request at a time (`engine_batch_size`), so how requests share a
  step never depends on when they arrived.

Not pinned, so different on another CPU or C library: glibc chooses its math kernels (`expf`,
`logf`, with or without FMA) by CPU when it loads, and other libraries do the same. One last-bit
difference is enough to change a sampled run: AdamW divides each gradient by its own running
scale, so a tiny gradient that flips sign moves a weight by a whole learning-rate step, and
from then on other tokens are sampled. A 20-step sampled GRPO run was seen to take another
path on an AMD EPYC than on the machine it was recorded on. GPUs are not covered at all.

So the test suite never compares a sampled run with numbers stored from another machine: it
compares mua's update with a float64 reference on fixed inputs (relative tolerances), and two
runs on the same machine with each other. The mode remains for debugging (two runs that should
agree do, bit for bit) and is slower (no vector kernels, no batching in the engine); it is not
meant for real runs.
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
