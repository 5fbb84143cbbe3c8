"""Seconds per phase of a training step: one timer instead of clocks kept by hand.

`StepTimer.phase(name)` is a context manager. Phases nest, and time is exclusive: the seconds spent
in a nested phase count for it alone, not also for the phase around it. So a weight push that
happens inside the rollout (an sglang engine is pushed to when it wakes) is `weight_push` time,
and `rollout` is what is left. `metrics()` returns `time/<name>_s` for every phase entered, plus
the phases named as always reported (0.0 when not entered). Phases are entered from one thread at
a time (the step's); nothing here is thread-safe.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext


class StepTimer:
    def __init__(self, always: tuple[str, ...] = ()) -> None:
        self.seconds: Counter = Counter({name: 0.0 for name in always})
        self._open: list[float] = []  # per open phase: seconds spent in phases nested in it

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        start = time.perf_counter()
        self._open.append(0.0)
        try:
            yield
        finally:
            nested = self._open.pop()
            total = time.perf_counter() - start
            self.seconds[name] += total - nested
            if self._open:
                self._open[-1] += total

    def metrics(self) -> dict[str, float]:
        return {f"time/{name}_s": float(s) for name, s in self.seconds.items()}


def timed(timer: StepTimer | None, name: str):
    """`timer.phase(name)`, or nothing when no timer is given (engine use outside a step)."""
    return timer.phase(name) if timer is not None else nullcontext()
