"""Time budgets of the rollout runner that leave out time spent waiting on LLM endpoints.

An endpoint bounds its own time, so the runner runs each budgeted await under a `WaitClock` and
`ChatEndpoint.chat` wraps each request in `outside_budgets()`, which stops every clock of the
calling task meanwhile. Clocks travel in a context variable, which asyncio copies into the tasks a
trajectory starts. `wait_within(awaitable, clock, budget_s)` is `asyncio.wait_for` on such a clock.
Not here: the budgets' values (`RolloutConfig`), what a timeout means (the runner).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import TypeVar

T = TypeVar("T")
_ACTIVE: contextvars.ContextVar[tuple[WaitClock, ...]] = contextvars.ContextVar(
    "mua_wait_clocks", default=()
)


class WaitClock:
    """Wall seconds since creation, minus the time spent inside `outside_budgets()` blocks."""

    def __init__(self) -> None:
        self._start = time.monotonic()
        self._stopped_s = 0.0
        self._depth = 0  # concurrent requests of one trajectory may overlap
        self._stopped_since = 0.0
        self._on_restart: list[Callable[[], None]] = []

    @property
    def stopped(self) -> bool:
        return self._depth > 0

    def elapsed_s(self) -> float:
        now = time.monotonic()
        running_stop = now - self._stopped_since if self._depth else 0.0
        return now - self._start - self._stopped_s - running_stop

    def _stop(self) -> None:
        self._depth += 1
        if self._depth == 1:
            self._stopped_since = time.monotonic()

    def _restart(self) -> None:
        self._depth -= 1
        if self._depth == 0:
            self._stopped_s += time.monotonic() - self._stopped_since
            for callback in list(self._on_restart):
                callback()


@contextlib.contextmanager
def outside_budgets() -> Iterator[None]:
    """Stop the calling task's clocks (its trajectory's, its env call's) for the block."""
    clocks = _ACTIVE.get()
    for clock in clocks:
        clock._stop()
    try:
        yield
    finally:
        for clock in clocks:
            clock._restart()


async def wait_within(awaitable: Awaitable[T], clock: WaitClock, budget_s: float) -> T:
    """Await `awaitable` as a task that sees `clock`; asyncio.TimeoutError (after cancelling it)
    once the clock has run `budget_s` seconds. A stopped clock never times out.

    Stopping and restarting the clock wakes nobody: a timer set for the budget left finds, when it
    fires, how much is left then (stopped time excluded) and is set again, or waits for a stopped
    clock to run again.
    """
    token = _ACTIVE.set((*_ACTIVE.get(), clock))
    try:
        task = asyncio.ensure_future(awaitable)
    finally:
        _ACTIVE.reset(token)
    try:
        while not task.done():
            remaining_s = budget_s - clock.elapsed_s()
            if clock.stopped:
                await _wake(task, clock, None)
            elif remaining_s <= 0:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
                raise asyncio.TimeoutError
            else:
                await _wake(task, None, remaining_s)
    except asyncio.CancelledError:
        task.cancel()
        raise
    return task.result()


def _wake(task: asyncio.Future, restarted: WaitClock | None, after_s: float | None):
    """A future done when `task` is, when `restarted` runs again, or after `after_s` seconds."""
    loop = asyncio.get_running_loop()
    wake = loop.create_future()

    def poke(*_args) -> None:
        if not wake.done():
            wake.set_result(None)

    task.add_done_callback(poke)
    timer = loop.call_later(after_s, poke) if after_s is not None else None
    if restarted is not None:
        restarted._on_restart.append(poke)

    def forget(_wake) -> None:
        task.remove_done_callback(poke)
        if timer is not None:
            timer.cancel()
        if restarted is not None:
            restarted._on_restart.remove(poke)

    wake.add_done_callback(forget)
    return wake
