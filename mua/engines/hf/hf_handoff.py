"""Hand-offs between the hf engine's serving thread and the threads around it.

`deliver` / `deliver_all` resolve callers' futures, each on its own event loop, from the serving
thread (one wake-up per loop per step). `Drive` is what the thread inside
`HFEngine.serve_while` waits on: rows to serve, or the caller's function (which it starts in a
helper thread) being done.
What this module does not do: batch, sample or hold any lock of the engine's (`hf_engine`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from mua.engines.engine_contract import GenerationResult
from mua.engines.hf.hf_sampling import Row


class Drive:
    """What the thread inside `HFEngine.serve_while` waits for: rows to serve, or the caller's end."""

    def __init__(self):
        self.cond = threading.Condition()
        self.work = False
        self.done = False

    def start_caller(self, fn: Callable[[], Any]) -> tuple[threading.Thread, dict[str, Any]]:
        """Start `fn()` in a daemon thread; the dict gets its "value" or "error" and `done` is set
        when it returns."""
        outcome: dict[str, Any] = {}

        def caller() -> None:
            try:
                outcome["value"] = fn()
            except BaseException as e:  # handed to the thread in `serve_while`
                outcome["error"] = e
            finally:
                with self.cond:
                    self.done = True
                    self.cond.notify()

        thread = threading.Thread(target=caller, name="mua-hf-engine-caller", daemon=True)
        thread.start()
        return thread, outcome

    def next_task(self) -> bool:
        """Block until there are rows to serve (True) or the caller's function returned (False)."""
        with self.cond:
            self.cond.wait_for(lambda: self.work or self.done)
            if self.work:
                self.work = False
                return True
            return False


def deliver(row: Row, outcome: GenerationResult | BaseException) -> None:
    """Resolve the row's future on its own event loop (from any thread)."""
    deliver_all([(row, outcome)])


def deliver_all(outcomes: list[tuple[Row, GenerationResult | BaseException]]) -> None:
    """Resolve each row's future with its outcome: one wake-up per event loop, however many
    rows of a step finished (each wake-up interrupts the serving thread)."""
    by_loop: dict[Any, list] = {}
    for row, outcome in outcomes:
        by_loop.setdefault(row.handle.get_loop(), []).append((row.handle, outcome))

    def resolve(pairs) -> None:
        for future, outcome in pairs:
            if future.done():
                continue
            if isinstance(outcome, BaseException):
                future.set_exception(outcome)
            else:
                future.set_result(outcome)

    for loop, pairs in by_loop.items():
        try:
            loop.call_soon_threadsafe(resolve, pairs)
        except RuntimeError:  # the caller's event loop is closed: nobody is waiting any more
            pass
