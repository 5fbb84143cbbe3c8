"""An asyncio event loop in a thread of its own that lives as long as its owner, not one step.

Partial rollouts run their conversations on a `BackgroundLoop`, so a parked conversation keeps
receiving its user's answer between steps (an `asyncio.run` would cancel it). `await
loop.run(coro)` from any other loop runs `coro` there (cancelling the caller cancels it); tasks it
leaves go on between calls. `close()` cancels what runs, runs the owner's clean-up, finalizes the
loop's async generators (closing its HTTP sessions) and stops the thread.
Not here: what runs on it (`mua.rollout.collect`).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class BackgroundLoop:
    """An event loop served by a daemon thread until `close()`."""

    def __init__(self, name: str = "mua-rollout-loop") -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._thread.start()
        self.closed = False

    def _serve(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    async def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Await `coro` on this loop from the caller's loop; cancelling the caller cancels it."""
        if self.closed:
            coro.close()
            raise RuntimeError("the background loop is closed")
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, self.loop))

    def call(self, coro: Coroutine[Any, Any, T], timeout_s: float | None = None) -> T:
        """Run `coro` on this loop from synchronous code and return its result."""
        if self.closed:
            coro.close()
            raise RuntimeError("the background loop is closed")
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout_s)

    def close(self, then: Coroutine[Any, Any, Any] | None = None, timeout_s: float = 60.0) -> None:
        """Cancel the tasks still running, then await `then` (clean-up that needs the loop, such
        as closing envs), finalize async generators, stop and join the thread."""
        if self.closed:
            if then is not None:
                then.close()
            return
        try:
            self.call(_cancel_the_rest(self.loop, then), timeout_s)
        finally:
            self.closed = True
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(timeout_s)
            if not self._thread.is_alive():
                self.loop.close()


async def _cancel_the_rest(loop: asyncio.AbstractEventLoop, then) -> None:
    current = asyncio.current_task()
    rest = [t for t in asyncio.all_tasks(loop) if t is not current]
    for task in rest:
        task.cancel()
    await asyncio.gather(*rest, return_exceptions=True)
    try:
        if then is not None:
            await then
    finally:
        await loop.shutdown_asyncgens()
