"""Child processes that must not outlive their parent.

`die_with_parent` arms the kernel's parent-death signal (Linux): torchrun against `mua train`,
each rank against torchrun, a served checkpoint against the verb that started it. Nothing here
starts a process.
"""

from __future__ import annotations

import os
import signal
import sys

_PR_SET_PDEATHSIG = 1  # prctl option, linux/prctl.h


def die_with_parent(sig: int = signal.SIGKILL) -> None:
    """Have the kernel send `sig` to this process when its parent exits (Linux; elsewhere a
    no-op). Ranks arm it against their torchrun agent, the agent against `mua train`."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    parent = os.getppid()
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, sig, 0, 0, 0) != 0:
        return  # not fatal: the process just keeps the default behaviour
    if os.getppid() != parent:  # the parent died before the signal was armed
        os._exit(1)
