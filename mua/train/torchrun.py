"""`python -m mua.train.torchrun ARGS`: torchrun (`torch.distributed.run`) without its error dumps.

The ranks print their own one-line errors (`mua.train.loop`); torchrun would add a report of
the failed ranks, its log lines about stopping the others, and on Ctrl-C the traceback of its
own interrupted wait. This runs the same launcher with its logger quietened and turns each
ending into an exit code for `mua train`: the first failed rank's code (1 runtime, 2 usage),
130 for Ctrl-C (SIGINT), and 1 with one line for a rank killed by a signal (which printed
nothing). Does not change how ranks are started, placed or restarted.
"""

from __future__ import annotations

import logging
import os
import signal
import sys

INTERRUPTED = 130


def main(argv: list[str]) -> int:
    # torch's elastic loggers take their level from LOGLEVEL when created (a user's wins)
    os.environ.setdefault("LOGLEVEL", "ERROR")
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import parse_args, run

    if os.environ["LOGLEVEL"] == "ERROR":
        for name in list(logging.Logger.manager.loggerDict):
            if name.startswith("torch.distributed.elastic"):
                logging.getLogger(name).setLevel(logging.CRITICAL)
    try:
        run(parse_args(argv))
    except ChildFailedError as e:
        return _failure_code(e.failures)
    except SignalException as e:
        return INTERRUPTED if e.sigval == signal.SIGINT else 128 + int(e.sigval)
    except KeyboardInterrupt:
        return INTERRUPTED
    return 0


def _failure_code(failures: dict) -> int:
    for rank in sorted(failures):
        code = failures[rank].exitcode
        if code > 0:
            return code
    rank = min(failures)
    code = failures[rank].exitcode
    try:
        name = signal.Signals(-code).name
    except ValueError:
        name = f"signal {-code}"
    print(f"error: rank {rank} was killed by {name}", file=sys.stderr, flush=True)
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
