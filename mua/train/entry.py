"""What every torchrun process runs: `python -m mua.train.entry RUN_DIR [--no-resume]
[--resume-from CHECKPOINT]`.

Reads only `RUN_DIR/recipe.resolved.yaml`, joins the process group, trains, and leaves the
group. User-facing errors print one line and exit with their code: on rank 0, and on any other
rank whose error is its own (an error all ranks raise alike after a collective is printed once).
Ctrl-C exits 130 without a traceback.
On Linux a rank started by torchrun dies with its torchrun agent (parent-death signal): torchrun
puts every rank in a session of its own, so a SIGKILL of `mua train` and torchrun would
otherwise leave orphaned ranks training on and writing checkpoints into the run dir.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys

_PR_SET_PDEATHSIG = 1  # prctl option, linux/prctl.h
INTERRUPTED = 130


def die_with_launcher() -> None:
    """SIGKILL this process when its parent (the torchrun agent) exits; Linux under torchrun only."""
    if not sys.platform.startswith("linux") or "TORCHELASTIC_RUN_ID" not in os.environ:
        return
    import ctypes

    parent = os.getppid()
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        return  # not fatal: the rank just keeps the default behaviour
    if os.getppid() != parent:  # the agent died before the signal was armed
        os._exit(1)


def _interrupt_once(signum, frame) -> None:
    """Ctrl-C reaches a rank once per signal sent (the terminal's, torchrun's forward): the
    first one stops the step, later ones must not break the clean-up."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="mua.train.entry")
    parser.add_argument("run_dir")
    parser.add_argument("--no-resume", action="store_true")
    parser.add_argument("--resume-from", default=None)
    args = parser.parse_args(argv)
    die_with_launcher()
    signal.signal(signal.SIGINT, _interrupt_once)

    import torch

    from mua.config import read_resolved
    from mua.determinism import apply_torch
    from mua.dist import destroy, init_distributed
    from mua.errors import MuaError

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    apply_torch()  # deterministic mode only
    recipe = read_resolved(args.run_dir)
    dist = init_distributed()
    try:
        from mua.train.trainer import Trainer

        trainer = Trainer(
            recipe, args.run_dir, dist, resume=not args.no_resume, resume_from=args.resume_from
        )
        trainer.fit()
    except MuaError as e:
        if os.environ.get("MUA_DEBUG") == "1":
            raise
        # An error every rank raised alike (after a collective) is printed once; any other
        # rank's own error is printed by that rank, so none is lost.
        if dist.is_main or not getattr(e, "on_every_rank", False):
            where = f"rank {dist.rank}: " if dist.world_size > 1 and not dist.is_main else ""
            print(f"error: {where}{e}", file=sys.stderr, flush=True)
        return e.exit_code
    except KeyboardInterrupt:  # Ctrl-C: `mua train` prints how to resume
        return INTERRUPTED
    finally:
        destroy()
    return 0


def exit_now(code: int) -> None:
    """Leave without interpreter finalisation once everything is flushed: the process group is
    already destroyed and the tracker closed, and C++ destructors of the communication threads
    running at interpreter exit have been seen to abort a finished rank (SIGABRT)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    exit_now(main())
