"""Time budgets of the rollout runner that leave out time spent waiting on LLM endpoints.

A trajectory's wall-time budget and an env call's budget should measure the env and the policy,
not the simulated user or judge: an endpoint bounds its own time (a timeout per attempt, a number
of retries, backoff) and reports what went wrong, while the time a request waits for a slot under
mua's own concurrency limit depends only on how many trajectories are in flight. So the runner
runs each budgeted await under a `WaitClock`, and `ChatEndpoint.chat` wraps each request (queue,
attempts, backoff) in `outside_budgets()`, which stops every clock of the calling task while it
lasts. Clocks reach the endpoint through a context variable: asyncio copies the context into the
tasks a trajectory starts, so a clock covers exactly the work done on its trajectory's behalf.

`wait_within(awaitable, clock, budget_s)` is `asyncio.wait_for` against such a clock. Not here:
the budgets' values (`RolloutConfig`) or what a timeout means for the trajectory (the runner).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import time
from collections.abc import Awaitable, Iterator
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
        self._changed: asyncio.Event | None = None

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
            self._notify()

    def _restart(self) -> None:
        self._depth -= 1
        if self._depth == 0:
            self._stopped_s += time.monotonic() - self._stopped_since
            self._notify()

    def _notify(self) -> None:
        if self._changed is not None:
            self._changed.set()

    def changed(self) -> asyncio.Event:
        if self._changed is None:
            self._changed = asyncio.Event()
        return self._changed


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
    once the clock has run `budget_s` seconds. A stopped clock never times out."""
    token = _ACTIVE.set((*_ACTIVE.get(), clock))
    try:
        task = asyncio.ensure_future(awaitable)
    finally:
        _ACTIVE.reset(token)
    changed = clock.changed()
    try:
        while not task.done():
            remaining_s = budget_s - clock.elapsed_s()
            if not clock.stopped and remaining_s <= 0:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
                raise asyncio.TimeoutError
            changed.clear()
            waiter = asyncio.ensure_future(changed.wait())
            try:
                await asyncio.wait(
                    {task, waiter},
                    timeout=None if clock.stopped else remaining_s,
                    return_when=asyncio.FIRST_COMPLETED,
                )
            finally:
                waiter.cancel()
    except asyncio.CancelledError:
        task.cancel()
        raise
    return task.result()
