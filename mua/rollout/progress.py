"""A Rich progress bar for rollouts on a terminal: trajectories done / total and tokens per second.

`rollout_progress(total, enabled)` is a context manager yielding an object with
`advance(trajectory)` (what `run_rollouts(progress=...)` calls), or None when disabled, e.g. when
output is not a terminal; the trainer then logs one line per step instead. No logging here.
"""

from __future__ import annotations

import time
from contextlib import contextmanager


class RolloutProgress:
    """Counts finished trajectories and their tokens; drives a Rich task."""

    def __init__(self, progress, task_id):
        self._progress = progress
        self._task_id = task_id
        self._start_s = time.perf_counter()
        self.tokens = 0
        self.done = 0

    def advance(self, trajectory) -> None:
        self.done += 1
        self.tokens += int(trajectory.metrics.get("assistant_tokens", 0))
        elapsed_s = max(time.perf_counter() - self._start_s, 1e-9)
        self._progress.update(
            self._task_id, advance=1, tokens_per_s=f"{self.tokens / elapsed_s:,.0f} tok/s"
        )


@contextmanager
def rollout_progress(total: int, enabled: bool | None = None, description: str = "rollouts"):
    from mua.cli.common import is_tty

    if enabled is None:
        enabled = is_tty()
    if not enabled:
        yield None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[tokens_per_s]}"),
        TimeElapsedColumn(),
    )
    with Progress(*columns, transient=False) as progress:
        task_id = progress.add_task(description, total=total, tokens_per_s="")
        yield RolloutProgress(progress, task_id)
