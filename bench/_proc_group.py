"""A one-process torch.distributed group for benchmarks that build the trainer in-process.

`mua train` always runs the policy under FSDP2 on a process group, even with one rank; this
context manager gives a benchmark the same (via `mua.distributed.init_distributed`) and leaves the
environment as it found it, so a later benchmark (or a torchrun it launches) starts clean.
"""

from __future__ import annotations

import contextlib
import os

_KEYS = ("MASTER_ADDR", "MASTER_PORT")


@contextlib.contextmanager
def one_process_group():
    from mua.distributed import destroy, init_distributed

    saved = {k: os.environ.get(k) for k in _KEYS}
    try:
        yield init_distributed()
    finally:
        destroy()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
