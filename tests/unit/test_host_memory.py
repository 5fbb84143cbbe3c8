"""`mua.host_memory`: blocks under 32 MiB come from the heap and stay mapped once freed."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from mua import host_memory

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="glibc's mallopt is Linux only"
)

# In a fresh process: malloc and touch 8 MiB (the size of one [1024, 2000] float32 logits
# tensor), then free it. Reports whether the block lay in the heap and whether the heap still
# reaches as far after the free (it was not trimmed back to the kernel).
_PROBE = """
import ctypes, json, sys
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
libc.memset.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t]
if sys.argv[1] == "keep":
    from mua.host_memory import keep_freed_memory
    assert keep_freed_memory(), "glibc did not take the settings"
def heap():
    for line in open("/proc/self/maps"):
        if line.rstrip().endswith("[heap]"):
            start, end = line.split()[0].split("-")
            return int(start, 16), int(end, 16)
    return 0, 0
size = 8 << 20
block = libc.malloc(size)
libc.memset(block, 1, size)
start, end = heap()
libc.free(block)
print(json.dumps({"in_heap": start <= block < end, "kept": heap()[1] >= end}))
"""


def _probe(mode: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    out = subprocess.run(
        [sys.executable, "-c", _PROBE, mode],
        capture_output=True,
        text=True,
        env=env,
        check=True,
        timeout=120,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_blocks_come_from_the_heap_and_stay_mapped_after_free():
    if _probe("default")["in_heap"]:
        pytest.skip("this C library serves 8 MiB blocks from the heap anyway")
    assert _probe("keep") == {"in_heap": True, "kept": True}


def test_a_users_own_malloc_tuning_wins(monkeypatch):
    monkeypatch.setenv("MALLOC_TRIM_THRESHOLD_", "131072")
    assert host_memory._apply() is False
