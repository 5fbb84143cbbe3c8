"""B5: CLI start-up — `mua --help` vs `python -c pass`, interleaved, median of 7."""

from __future__ import annotations

import subprocess
import sys

from bench.common import interleaved

ID = "B5"
BAR = {"help_extra_seconds": "<= 0.5"}


def run() -> dict[str, float]:
    def bare():
        subprocess.run([sys.executable, "-c", "pass"], check=True, capture_output=True)

    def help_():
        subprocess.run(
            [sys.executable, "-m", "mua.cli.main", "--help"], check=True, capture_output=True
        )

    t = interleaved({"bare": bare, "help": help_}, repeats=7, warmup=2)
    return {
        "help_extra_seconds": t["help"] - t["bare"],
        "help_seconds": t["help"],
        "python_seconds": t["bare"],
    }
