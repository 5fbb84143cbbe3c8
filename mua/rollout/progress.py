"""Progress of rollouts: a Rich bar on a terminal (done / total, tokens per second, elapsed, ETA).

`rollout_progress(total, enabled)` is a context manager yielding an object with
`advance(trajectory)` (what `mua.rollout.collect.collect(progress=...)` calls), or None
when disabled, e.g. when output is not a terminal. Training shows its step's rollouts through
`mua.track.console.StepConsole.rollouts`, which reuses `RolloutProgress` and `progress_columns`
inside its live view. No logging here.
"""

from __future__ import annotations

import time
from contextlib import contextmanager


def progress_columns() -> tuple:
    """The columns of every mua progress bar; the ETA is Rich's, from the recent rate."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    return (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[tokens_per_s]}"),
        TimeElapsedColumn(),
        TextColumn("eta"),
        TimeRemainingColumn(),
    )


class RolloutProgress:
    """Counts finished trajectories and their tokens; drives a Rich task."""

    def __init__(self, progress, task_id, remove_at: int | None = None):
        self._progress = progress
        self._task_id = task_id
        self._remove_at = remove_at  # drop the bar once this many are done (a step's rollouts)
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
        if self._remove_at is not None and self.done == self._remove_at:
            self._progress.remove_task(self._task_id)


@contextmanager
def rollout_progress(total: int, enabled: bool | None = None, description: str = "rollouts"):
    from mua.terminal import is_tty

    if enabled is None:
        enabled = is_tty()
    if not enabled:
        yield None
        return
    from rich.progress import Progress

    with Progress(*progress_columns(), transient=False) as progress:
        task_id = progress.add_task(description, total=total, tokens_per_s="")
        yield RolloutProgress(progress, task_id)
