"""Console output of per-step metrics: a Rich live table on a terminal, one line per step otherwise.

Shows a fixed, short list of headline metrics; everything else goes to MLflow only.
"""

from __future__ import annotations

import sys

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
)


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


class StepConsole:
    def __init__(self, total_steps: int, live: bool | None = None):
        self.total_steps = total_steps
        self.live_mode = sys.stdout.isatty() if live is None else live
        self._live = None
        self._rows: list[tuple[int, dict]] = []

    def _table(self):
        from rich.table import Table

        table = Table(title=f"mua train ({len(self._rows)}/{self.total_steps} steps)")
        table.add_column("step", justify="right")
        cols = [k for k in HEADLINE if any(k in m for _, m in self._rows)]
        for k in cols:
            table.add_column(k, justify="right")
        for step, m in self._rows[-15:]:
            table.add_row(str(step), *[_fmt(m.get(k, "")) for k in cols])
        return table

    def step(self, step: int, metrics: dict) -> None:
        if not self.live_mode:
            parts = [f"{k}={_fmt(metrics[k])}" for k in HEADLINE if k in metrics]
            print(f"step {step}/{self.total_steps} " + " ".join(parts), flush=True)
            return
        from rich.live import Live

        self._rows.append((step, metrics))
        if self._live is None:
            self._live = Live(self._table(), refresh_per_second=4)
            self._live.start()
        else:
            self._live.update(self._table())

    def close(self) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None
