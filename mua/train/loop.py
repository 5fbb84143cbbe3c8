"""What every torchrun process runs: `python -m mua.train.loop RUN_DIR [--no-resume]
[--resume-from CHECKPOINT]`, the step loop of `mua train`.

`train_rank` is the whole life of a rank: it reads only the run dir's recipe, joins the process
group, builds the `Trainer`, calls `rl_step` or `sft_step` per step, then the last checkpoint and
export. User-facing errors print one line once; Ctrl-C exits 130, SIGTERM finishes the step,
checkpoints and exits 143, and a rank dies with its torchrun (docs/architecture.md).
Not here: building the pieces, checkpoints and exports (`Trainer`), the steps themselves.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from pathlib import Path

from mua.processes import die_with_parent

INTERRUPTED = 130
TERMINATED = 128 + signal.SIGTERM
_signals = {"terminate": False, "interrupt": False}


def train_rank(argv: list[str] | None = None) -> int:
    """The torchrun target: this rank's part of the run in RUN_DIR; returns its exit code."""
    args = _parse_args(argv)
    if "TORCHELASTIC_RUN_ID" in os.environ:
        die_with_parent()
    signal.signal(signal.SIGINT, _interrupt_once)
    signal.signal(signal.SIGTERM, _note_terminate)
    sys.unraisablehook = _keep_swallowed_interrupt

    import torch

    from mua.config import read_resolved
    from mua.determinism import apply_torch
    from mua.distributed import destroy, init_distributed
    from mua.errors import MuaError
    from mua.train.guards import RunStopped
    from mua.train.run_dir import recipe_file
    from mua.train.trainer import Preempted, Trainer

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    apply_torch()  # deterministic mode only
    recipe = read_resolved(recipe_file(Path(args.run_dir)))  # a resume's pending one first
    dist = init_distributed()
    try:
        trainer = Trainer(
            recipe, args.run_dir, dist, resume=not args.no_resume, resume_from=args.resume_from
        )
        with trainer.tracked():  # the tracker's run ends FINISHED, FAILED or KILLED
            for step in range(trainer.start_step + 1, trainer.total_steps + 1):
                if _signals["interrupt"]:  # a Ctrl-C that landed in a finalizer (see below)
                    raise KeyboardInterrupt
                if _terminate_agreed():  # SIGTERM: keep what the finished steps did, and stop
                    trainer.save_unless_saved(step - 1)
                    raise Preempted
                clock = time.perf_counter()
                try:
                    metrics = trainer.run_step(step)
                except RunStopped as e:  # a stop inside the step names its step here
                    raise RunStopped(f"step {step}: {e}") from None
                # log, stop rules (RL), checkpoint and periodic export when due
                trainer.after_step(step, metrics, seconds=time.perf_counter() - clock)
            trainer.finish()  # the last checkpoint, hf/final, ranks leave together
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
    except Preempted:  # SIGTERM: the checkpoint is written; `mua train` prints how to resume
        return TERMINATED
    finally:
        destroy()
    return 0


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="mua.train.loop")
    parser.add_argument("run_dir")
    parser.add_argument("--no-resume", action="store_true")
    parser.add_argument("--resume-from", default=None)
    return parser.parse_args(argv)


def _note_terminate(signum, frame) -> None:
    """SIGTERM: remembered; the loop stops before its next step (`_terminate_agreed`)."""
    _signals["terminate"] = True


def _terminate_agreed() -> bool:
    """True on every rank when SIGTERM reached any rank (a collective: every rank calls it once
    per step, at the same place)."""
    from mua.distributed import all_reduce_max

    return bool(all_reduce_max([float(_signals["terminate"])])[0] > 0)


def _interrupt_once(signum, frame) -> None:
    """Ctrl-C reaches a rank once per signal sent (the terminal's, torchrun's forward): the
    first one stops the step, later ones must not break the clean-up."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    raise KeyboardInterrupt


def _keep_swallowed_interrupt(unraisable) -> None:
    """Python swallows an exception raised in a finalizer or a weakref callback (a garbage
    collection the signal happened to interrupt) and prints it as "Exception ignored in". A
    Ctrl-C that lands there is remembered instead, and the loop raises it before the next step;
    anything else is printed as Python would."""
    if isinstance(unraisable.exc_value, KeyboardInterrupt):
        _signals["interrupt"] = True
        return
    sys.__unraisablehook__(unraisable)


def exit_now(code: int) -> None:
    """Leave without interpreter finalisation once everything is flushed: the process group is
    already destroyed and the tracker closed, and C++ destructors of the communication threads
    running at interpreter exit have been seen to abort a finished rank (SIGABRT)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    exit_now(train_rank())
