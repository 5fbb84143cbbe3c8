"""`python -m mua.train.torchrun ARGS`: torchrun (`torch.distributed.run`) without its error dumps.

The ranks print their own one-line errors, so this runs the same launcher with its logger quiet
and turns each ending into an exit code: the first failed rank's (1 runtime, 2 usage), 130 for
SIGINT, 143 for SIGTERM, 1 with one line for a rank killed by a signal. Started by `mua train`
(MUA_TORCHRUN_OF_LAUNCHER=1) in a session of its own, it dies with that launcher.
Not here: how ranks are started, placed or restarted.
"""

from __future__ import annotations

import logging
import os
import signal
import sys

INTERRUPTED = 130
OF_LAUNCHER = "MUA_TORCHRUN_OF_LAUNCHER"


def main(argv: list[str]) -> int:
    if os.environ.pop(OF_LAUNCHER, None) == "1":
        from mua.processes import die_with_parent

        die_with_parent()  # a SIGKILLed `mua train` takes torchrun, and so the ranks, with it
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
