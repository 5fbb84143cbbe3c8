"""B5: CLI start-up — `mua --help` vs `python -c pass`, interleaved, median of 7."""

from __future__ import annotations

import subprocess
import sys

from bench.common import interleaved, require_work

ID = "B5"
BAR = {"help_extra_seconds": "<= 0.5"}


def run() -> dict[str, float]:
    def bare():
        subprocess.run([sys.executable, "-c", "pass"], check=True, capture_output=True)

    printed = []

    def help_():
        done = subprocess.run(
            [sys.executable, "-m", "mua.cli.main", "--help"], check=True, capture_output=True
        )
        printed.append(len(done.stdout) if b"mua" in done.stdout else 0)

    t = interleaved({"bare": bare, "help": help_}, repeats=7, warmup=2)
    require_work(ID, "`mua --help`", help_bytes=min(printed))  # it printed the help every time
    return {
        "help_extra_seconds": t["help"] - t["bare"],
        "help_seconds": t["help"],
        "python_seconds": t["bare"],
    }
