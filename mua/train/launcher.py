"""`mua train` before any rank exists: validate, claim and lock the run dir, write the resolved
recipe, start torchrun.

Validation runs here without torch, so a bad recipe fails in well under a second (one line, exit
2); the run dir's checks are `mua.train.run_dir`. torchrun (`mua.train.torchrun`) then starts
`mua.train.loop` on every rank. Ctrl-C exits 130, a forwarded SIGTERM lets the ranks checkpoint
and exits 143 naming the checkpoint. One node: `--standalone`; many: the same command on each with
`--nnodes M --node-rank R --rdzv-endpoint HOST:PORT` (node 0's). Not here: managing processes.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from mua.errors import RunFailure, UsageError


def check_inputs(recipe) -> None:
    """Fast checks the schema cannot do: files exist, the gym is registered, lengths agree."""
    if not recipe.data.train_files and not any(e.train_files for e in recipe.gyms):
        kind = "conversation JSONL/parquet" if recipe.algo.kind == "sft" else "task parquet"
        raise UsageError(
            f"data.train_files is empty; give {kind} files (e.g. data.train_files=[data/guess/train.parquet])"
        )
    for p in [*recipe.data.train_files, *recipe.data.test_files]:
        if not Path(p).exists():
            raise UsageError(
                f"data file {p} not found; create it with `mua prep` (tasks) or `mua rollout` (SFT data)"
            )
    if recipe.algo.kind != "sft":
        from mua.gym.mix import check_gyms

        check_gyms(recipe, "train")  # names, files' gyms, overrides: one line naming the entry
        _check_rl_inputs(recipe)
    from mua.track.sinks import check_report_to

    check_report_to(recipe.track.report_to)  # a sink whose package is missing: one line, exit 2
    from mua.train.data import check_data_files

    check_data_files(recipe)  # bad rows: one line naming file and row, before any rank starts
    from mua.models.model_loading import resolve_model

    resolve_model(
        recipe.model.path, recipe.model.tokenizer
    )  # before any rank: one line, no retries
    if recipe.model.lora is not None:
        from mua.models.lora import check_targets

        check_targets(recipe.model)  # target modules that match nothing: one line, exit 2


def _check_rl_inputs(recipe) -> None:
    """What the recipe's engine cannot launch here (its spec's `check_launch`)."""
    from mua.engines.registry import engine_spec

    check = engine_spec(recipe.rollout.engine).check_launch
    if check is not None:
        check(recipe)  # one line, exit 2, before torchrun starts


def torchrun_command(
    run_dir: Path,
    *,
    nproc_per_node: int,
    nnodes: int,
    node_rank: int,
    rdzv_endpoint: str | None,
    resume: bool,
    resume_from: str | None = None,
) -> list[str]:
    cmd = [sys.executable, "-m", "mua.train.torchrun", f"--nproc-per-node={nproc_per_node}"]
    if nnodes == 1 and rdzv_endpoint is None:
        cmd.append("--standalone")
    else:
        if rdzv_endpoint is None or ":" not in rdzv_endpoint:
            raise UsageError(
                "--rdzv-endpoint HOST:PORT is required with --nnodes > 1 (node 0's address)"
            )
        host, port = rdzv_endpoint.rsplit(":", 1)
        if not port.isdigit():
            raise UsageError(f"--rdzv-endpoint {rdzv_endpoint}: the port must be a number")
        if not 0 <= node_rank < nnodes:
            raise UsageError(f"--node-rank {node_rank} must be in [0, {nnodes - 1}]")
        cmd += [
            f"--nnodes={nnodes}",
            f"--node-rank={node_rank}",
            f"--master-addr={host}",
            f"--master-port={port}",
        ]
    cmd += ["-m", "mua.train.loop", str(run_dir)]
    if not resume:
        cmd.append("--no-resume")
    if resume_from:
        cmd += ["--resume-from", resume_from]
    return cmd


def launch(recipe, **options) -> None:
    """Check the recipe, run the pre-flight of its gym entries (`mua.run.preflight`: serve the
    checkpoints they name, ask their endpoints) and run the ranks under torchrun until they end.
    `options`: `_start_ranks`'s."""
    check_inputs(recipe)
    if recipe.algo.kind == "sft":  # no conversations run: nothing to serve or ask
        _start_ranks(recipe, **options)
        return
    from mua.gym.mix import with_entry_budgets
    from mua.run.preflight import preflight

    recipe.gyms = with_entry_budgets(recipe)  # each entry's budgets, in the resolved recipe
    with preflight(recipe, "train"):  # a wrong key or model stops here, before any rank starts
        _start_ranks(recipe, **options)


def _start_ranks(
    recipe,
    *,
    nproc_per_node: int = 1,
    nnodes: int = 1,
    node_rank: int = 0,
    rdzv_endpoint: str | None = None,
    resume: bool = True,
    resume_from: str | None = None,
    allow_recipe_change: bool = False,
) -> None:
    from mua.determinism import child_env
    from mua.train import run_dir as run_folder

    if nproc_per_node < 1 or nnodes < 1:
        raise UsageError("--nproc-per-node and --nnodes must be at least 1")
    run_dir = Path(recipe.run_dir)
    cmd = torchrun_command(
        run_dir,
        nproc_per_node=nproc_per_node,
        nnodes=nnodes,
        node_rank=node_rank,
        rdzv_endpoint=rdzv_endpoint,
        resume=resume,
        resume_from=_checked_resume_from(resume_from, run_dir, resume),
    )
    run_folder.claim(run_dir)
    lock = run_folder.RunLock(run_dir) if node_rank == 0 else None
    try:
        changes = run_folder.check_resume_recipe(
            run_dir, recipe, resume=resume, allow_change=allow_recipe_change
        )
        # a resume's recipe replaces the run's once the ranks loaded the checkpoint (promote)
        run_folder.stage(run_dir, recipe, changes, resuming=resume)
        env = child_env()  # MUA_DETERMINISTIC=1: pinned threads and kernels (mua.determinism)
        env.setdefault("OMP_NUM_THREADS", "1")
        # torchrun holds the lock too: a killed launcher leaves it locked until torchrun ends
        code = _run_ranks(cmd, env, pass_fds=(lock.fd,) if lock else ())
    finally:
        if lock is not None:
            lock.release()
    if code == INTERRUPTED:
        raise Interrupted(
            f"interrupted; run the same command again to resume {run_dir} from its latest "
            "checkpoint"
        )
    if code == TERMINATED:
        latest = run_folder.latest_step_dir(run_dir)
        kept = f"its latest checkpoint is {latest}" if latest else "it has no checkpoint yet"
        raise Terminated(
            f"stopped by SIGTERM; {kept}; run the same command again to resume {run_dir}"
        )
    if code in (1, 2):  # a rank (or mua.train.torchrun) printed its one line already
        raise SystemExit(code)
    if code != 0:
        raise RunFailure(
            f"training failed (exit {code}); see the messages above; the run dir is {run_dir}"
        )


INTERRUPTED = 130
TERMINATED = 128 + 15  # SIGTERM


class Interrupted(RunFailure):
    """Ctrl-C: the ranks were stopped; the run can resume."""

    exit_code = INTERRUPTED


class Terminated(RunFailure):
    """SIGTERM: the ranks checkpointed (if they could) and stopped; the run can resume."""

    exit_code = TERMINATED


def _run_ranks(cmd: list[str], env: dict, pass_fds: tuple) -> int:
    """Run torchrun in a session of its own and forward Ctrl-C (SIGINT) and SIGTERM to it once;
    returns its code, 130 after Ctrl-C. A second Ctrl-C, or torchrun still running long after
    its ranks' shutdown timeout, kills it."""
    import signal

    from mua.train.torchrun import OF_LAUNCHER

    def on_sigterm(signum, frame):
        raise _SigTerm

    proc = subprocess.Popen(
        cmd, env={**env, OF_LAUNCHER: "1"}, pass_fds=pass_fds, start_new_session=True
    )
    previous = signal.getsignal(signal.SIGTERM)
    try:
        signal.signal(signal.SIGTERM, on_sigterm)
        return proc.wait()
    except KeyboardInterrupt:
        _stop(proc, signal.SIGINT)
        return INTERRUPTED
    except _SigTerm:  # whatever became of the ranks, the run was stopped and can resume
        code = _stop(proc, signal.SIGTERM)
        return code if code in (0, 1, 2) else TERMINATED
    finally:
        signal.signal(signal.SIGTERM, previous)


class _SigTerm(Exception):
    """SIGTERM reached `mua train` while torchrun ran."""


def _stop(proc: subprocess.Popen, sig: int) -> int:
    """Send `sig` to torchrun once and wait for it (its ranks may be writing a checkpoint);
    further SIGTERMs are ignored meanwhile, and a second Ctrl-C kills it, as does a torchrun
    still running a minute past its ranks' shutdown timeout."""
    import os
    import signal

    wait_s = int(os.environ.get("TORCH_ELASTIC_SHUTDOWN_TIMEOUT", "30")) + 60

    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    proc.send_signal(sig)
    try:
        code = proc.wait(timeout=wait_s)
    except (KeyboardInterrupt, subprocess.TimeoutExpired):
        proc.kill()
        code = proc.wait()
    # killed by the signal itself (before its handlers were installed): the shell's 128 + N
    return 128 + sig if code == -sig else code


def _checked_resume_from(resume_from: str | None, run_dir: Path, resume: bool) -> str | None:
    """`--resume-from`: a checkpoint folder (`global_step_N`, or its path) of this run dir."""
    if resume_from is None:
        return None
    if not resume:
        raise UsageError("--resume-from and --no-resume contradict each other; give one")
    path = Path(resume_from)
    if not path.is_dir():
        path = run_dir / "checkpoints" / resume_from
    if not (path / "trainer_state.pt").exists():
        raise UsageError(
            f"--resume-from {resume_from}: no checkpoint there; give a folder "
            f"global_step_N of {run_dir / 'checkpoints'}"
        )
    return str(path.resolve())
