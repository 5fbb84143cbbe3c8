"""What a run prints: per-step metrics, progress within a step, and how loud libraries may be.

`StepConsole` shows a short list of headline metrics: a Rich live view on a terminal, else one
line per step, with an ETA from this process's own steps. `quiet_libraries()` keeps third-party
warnings, bars and INFO lines off the console unless `mua -v` (MUA_VERBOSE=1), through environment
variables that the processes a verb starts inherit.
Not here: computing metrics, logging to MLflow.
"""

from __future__ import annotations

import os
import sys
import time
import warnings
from pathlib import Path

HEADLINE = (
    "loss",
    "reward/mean",
    "success/mean",
    "turns/mean",
    "kl",
    "grad_norm",
    "lr",
    "time/step_s",
    "tokens_per_s",
    "async/staleness_mean",  # asynchronous runs only (docs/async_rl.md)
    "async/groups_carried",
)

# What `quiet_libraries` sets (unless the variable is set already): the libraries read them when
# they are imported, in this process and in every process it starts.
QUIET_ENV = {
    "TRANSFORMERS_VERBOSITY": "error",
    "TRANSFORMERS_NO_ADVISORY_WARNINGS": "1",
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",
    "MLFLOW_LOGGING_LEVEL": "WARNING",
    "PYTHONWARNINGS": "ignore::FutureWarning",
}


def verbose() -> bool:
    return os.environ.get("MUA_VERBOSE") == "1"


def quiet_libraries() -> None:
    """Silence library warnings, log lines and bars unless MUA_VERBOSE=1 (see the module doc)."""
    if verbose():
        return
    for key, value in QUIET_ENV.items():
        os.environ.setdefault(key, value)
    warnings.filterwarnings("ignore", category=FutureWarning)


def format_duration(seconds: float) -> str:
    """`42s`, `3m05s`, `2h07m`: short enough for a status line."""
    seconds = max(0, int(round(seconds)))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{(seconds % 3600) // 60:02d}m"


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


class StepEta:
    """Time left from the steps this process has run (`mark(step)` after each step)."""

    def __init__(self, total_steps: int, clock=time.perf_counter):
        self.total_steps = total_steps
        self._clock = clock
        self._start_s = clock()
        self._first_step: int | None = None
        self._last_step = 0

    def mark(self, step: int) -> None:
        if self._first_step is None:
            self._first_step = step
        self._last_step = step

    def seconds_left(self) -> float | None:
        if self._first_step is None:
            return None
        done = self._last_step - self._first_step + 1
        per_step = (self._clock() - self._start_s) / max(done, 1)
        return per_step * max(self.total_steps - self._last_step, 0)


def gym_split(metrics: dict) -> str:
    """The per-gym part of a step line: `gyms: travel 0.41 (38%) · turtle 0.12 (62%)` (reward and
    share of the batch per `train/<label>/`, `masked N` beside or instead of the reward when
    trajectories were masked; `val/<label>/reward_mean` when validated)."""
    labels = dict.fromkeys(
        k[6:].rsplit("/", 1)[0]
        for k in metrics
        if k.startswith("train/") and k.endswith(("/reward", "/share", "/masked"))
    )
    parts = []
    for label in labels:
        reward = metrics.get(f"train/{label}/reward")
        masked = int(metrics.get(f"train/{label}/masked", 0))
        if reward is None and not masked:
            continue
        words = ([_fmt(reward)] if reward is not None else []) + (
            [f"masked {masked}"] if masked else []
        )
        text = f"{label} " + " ".join(words)
        share = metrics.get(f"train/{label}/share")
        if share is not None:
            text += f" ({share:.0%})"
        val = metrics.get(f"val/{label}/reward_mean")
        if val is not None:
            text += f" val {_fmt(val)}"
        parts.append(text)
    return "gyms: " + " · ".join(parts) if parts else ""


class StepConsole:
    def __init__(self, total_steps: int, live: bool | None = None):
        self.total_steps = total_steps
        self.live_mode = sys.stdout.isatty() if live is None else live
        self.eta = StepEta(total_steps)
        self._live = None
        self._progress = None
        self._steps_task = None
        self._rows: list[tuple[int, dict]] = []

    def _table(self):
        from rich.table import Table

        last = self._rows[-1][0] if self._rows else 0
        table = Table(title=f"mua train (step {last}/{self.total_steps})")
        table.add_column("step", justify="right")
        cols = [k for k in HEADLINE if any(k in m for _, m in self._rows)]
        for k in cols:
            table.add_column(k, justify="right")
        split = any(gym_split(m) for _, m in self._rows)
        if split:
            table.add_column("per gym (reward, share)", justify="left")
        for step, m in self._rows[-15:]:
            extra = [gym_split(m)[6:]] if split else []
            table.add_row(str(step), *[_fmt(m.get(k, "")) for k in cols], *extra)
        return table

    def _view(self):
        from rich.console import Group

        return Group(self._table(), self._progress) if self._rows else self._progress

    def _start_live(self, first_step: int) -> None:
        from rich.live import Live
        from rich.progress import Progress

        from mua.rollout.progress import progress_columns

        if self._live is not None:
            return
        self._progress = Progress(*progress_columns())
        self._steps_task = self._progress.add_task(
            "steps", total=self.total_steps, completed=first_step - 1, tokens_per_s=""
        )
        self._live = Live(self._view(), refresh_per_second=4)
        self._live.start()

    def rollouts(self, step: int, total: int):
        """Progress of this step's rollouts: an object with `advance(trajectory)` on a terminal,
        None otherwise (the step's line is the progress then)."""
        if not self.live_mode or total <= 0:
            return None
        from mua.rollout.progress import RolloutProgress

        self._start_live(step)
        task_id = self._progress.add_task(f"step {step} rollouts", total=total, tokens_per_s="")
        return RolloutProgress(self._progress, task_id, remove_at=total)

    def step(self, step: int, metrics: dict) -> None:
        self.eta.mark(step)
        left = self.eta.seconds_left()
        if not self.live_mode:
            parts = [f"{k}={_fmt(metrics[k])}" for k in HEADLINE if k in metrics]
            eta = f" eta={format_duration(left)}" if left is not None else ""
            split = gym_split(metrics)
            split = f" {split}" if split else ""
            print(f"step {step}/{self.total_steps} " + " ".join(parts) + eta + split, flush=True)
            return
        self._rows.append((step, metrics))
        self._start_live(step)
        self._progress.update(self._steps_task, completed=step)
        self._live.update(self._view())

    def close(self) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None


def mlflow_ui_command(uri: str) -> str:
    """What to run (or open) to see the MLflow store `uri` in MLflow's UI, for this install.

    A tracking server (`http(s)://...`) serves its own UI. For a local store: `mlflow ui
    --backend-store-uri URI` when the UI server is installed; mlflow-skinny (a core dependency)
    has none, so otherwise the line first installs the `ui` extra (full mlflow) with this
    environment's python: from the source checkout when mua runs from one, else from the index.
    Executables are named by path when this environment's bin folder is not on PATH.
    """
    if uri.startswith(("http://", "https://")):
        return f"open {uri} in a browser (the tracking server serves MLflow's UI)"
    if ui_server_installed():
        return f"{_this_env('mlflow')} ui --backend-store-uri {uri}"
    command = f"{_this_env('mlflow', installing=True)} ui --backend-store-uri {uri}"
    source = Path(__file__).resolve().parents[2]
    extra = f"-e '{source}[ui]'" if (source / "pyproject.toml").is_file() else "'mua[ui]'"
    return f"{_this_env('python')} -m pip install {extra} (full mlflow, for its UI), then {command}"


def ui_server_installed() -> bool:
    """True when full mlflow (its UI's built pages and the server's flask) is importable; found
    without importing mlflow."""
    import importlib.util

    spec = importlib.util.find_spec("mlflow")
    return (
        spec is not None
        and spec.origin is not None
        and (Path(spec.origin).parent / "server" / "js" / "build" / "index.html").is_file()
        and importlib.util.find_spec("flask") is not None
    )


def _this_env(executable: str, installing: bool = False) -> str:
    """`executable` as a command that runs this environment's copy: its bare name when PATH
    finds that copy, else its path; the bare name when the environment has none (and is not
    `installing` it)."""
    import shutil

    here = Path(sys.executable).parent / executable
    if shutil.which(executable) == str(here) or not (here.exists() or installing):
        return executable
    return str(here)
