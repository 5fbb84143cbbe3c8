"""Whether standard output is a terminal a person watches (not a pipe, a log file or TERM=dumb).

Progress bars, live views and table widths ask it; nothing here draws or prints.
"""

from __future__ import annotations

import os
import sys


def is_tty() -> bool:
    return sys.stdout.isatty() and os.environ.get("TERM") != "dumb"
