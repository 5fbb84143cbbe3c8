"""Keep freed host memory for reuse in the processes that train and generate (glibc only).

By default glibc hands large freed blocks back to the kernel: blocks above its mmap threshold
are unmapped on free, and free space at the top of a heap beyond the trim threshold is
released. A trainer or an engine frees and re-allocates tensors of the same sizes every step,
so each step faults those pages in again, and the kernel zero-fills every one of them. One GRPO
step of B1's 1.5M-parameter model on CPU took 9,000-23,000 such faults, and the step ran 15-30%
faster without them.

`keep_freed_memory()` sets glibc's mmap threshold to its maximum (32 MiB: smaller blocks come from
the heap) and its trim threshold to 1 GiB (freed heap memory stays mapped), so the next step
reuses pages it has already touched. Peak resident memory is what the process already reached;
memory is simply not returned between steps. Blocks over 32 MiB still use mmap.

Left alone: a process where the user set `MALLOC_MMAP_THRESHOLD_`, `MALLOC_TRIM_THRESHOLD_` or
`MALLOC_TOP_PAD_` (their tuning wins), and other C libraries or preloaded allocators (only glibc
has `mallopt`; without it this does nothing). Not here: torch's own caching allocators (CUDA),
which already keep their memory.
"""

from __future__ import annotations

import ctypes
import os

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_MMAP_THRESHOLD = 32 << 20  # glibc's upper limit for the mmap threshold on 64-bit systems
_TRIM_THRESHOLD = 1 << 30
_USER_TUNING = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_")

_applied: bool | None = None


def keep_freed_memory() -> bool:
    """Apply the settings once per process; True when glibc took them."""
    global _applied
    if _applied is None:
        _applied = _apply()
    return _applied


def _apply() -> bool:
    if any(name in os.environ for name in _USER_TUNING):
        return False
    try:
        libc = ctypes.CDLL(None)
        mallopt = libc.mallopt
        libc.gnu_get_libc_version  # noqa: B018 - present in glibc only
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD)) and bool(
        mallopt(_M_TRIM_THRESHOLD, _TRIM_THRESHOLD)
    )
