"""A real SIGKILL of `mua train` (the CLI, torchrun and both ranks) while a checkpoint is being written.

The killed run saves every step; `MUA_TEST_CHECKPOINT_DELAY_S` (a test-only hook in
`mua.train.checkpoint`) holds each finished write under its temporary name for a moment, so the
watcher reliably sees `.tmp-global_step_3` while `global_step_2` is complete and SIGKILLs the
process group of `mua train` right then. torchrun starts each rank in a session of its own, so
the ranks are not in that group: they must die with their torchrun (`mua.train.loop` arms a
parent-death signal), and the test fails if one outlives it. Afterwards: step 2 is the latest checkpoint and merges with verified
logits, the temporary folder is not taken for a checkpoint, and re-running the same command
resumes from step 2 and ends with the losses and parameters of an uninterrupted run (1e-6).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.integration.train_helpers import (
    REPO,
    final_params,
    metric_history,
    run_train,
    write_sft_data,
    write_sft_recipe,
)

KILL_AT_STEP = 3  # killed while writing this step's checkpoint; the previous one is complete
WRITE_HOLD_S = 1.5  # how long each finished write waits before its rename in the killed run
POLL_S = 0.01
RANKS = "2"
pytestmark = pytest.mark.integration


def _start_train(recipe: Path, log: Path, env_extra: dict) -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "COLUMNS": "200", **env_extra}
    env.pop("MLFLOW_TRACKING_URI", None)
    with open(log, "w") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "mua.cli.main", "train", str(recipe), "--nproc-per-node", RANKS],
            cwd=REPO,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: torchrun and the ranks join it
        )


def _wait_for_write_in_progress(
    proc: subprocess.Popen, checkpoints: Path, log: Path, timeout_s: float
) -> None:
    """Return once `.tmp-global_step_K` exists while `global_step_{K-1}` is complete."""
    previous = checkpoints / f"global_step_{KILL_AT_STEP - 1}" / "trainer_state.pt"
    in_progress = checkpoints / f".tmp-global_step_{KILL_AT_STEP}"
    too_late = checkpoints / f"global_step_{KILL_AT_STEP}"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if in_progress.is_dir() and previous.is_file():
            return
        if too_late.exists() or proc.poll() is not None:
            break
        time.sleep(POLL_S)
    ranks = _rank_pids(checkpoints.parent)
    _kill_group(proc)
    for pid in _wait_gone(ranks, timeout_s=5):
        os.kill(pid, signal.SIGKILL)
    output = log.read_text()[-3000:]
    pytest.fail(f"never saw step {KILL_AT_STEP}'s write in progress (exit {proc.poll()}): {output}")


def _rank_pids(run_dir: Path) -> list[int]:
    """Pids of the ranks `python -m mua.train.loop RUN_DIR` (not of torchrun, whose argv names them)."""
    pids = []
    for proc_dir in Path("/proc").iterdir():
        if not proc_dir.name.isdigit():
            continue
        try:
            argv = (proc_dir / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        rank = b"mua.train.loop" in argv and b"mua.train.torchrun" not in argv
        if rank and str(run_dir).encode() in argv:
            pids.append(int(proc_dir.name))
    return pids


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def _kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL the run's process group (`mua train` and torchrun) and reap it."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(timeout=30)


def _wait_gone(pids: list[int], timeout_s: float) -> list[int]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        pids = [p for p in pids if _alive(p)]
        if not pids:
            return []
        time.sleep(0.05)
    return pids


def _losses_by_step(run_dir: Path) -> dict[int, list[float]]:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{run_dir.resolve() / 'mlflow.db'}")
    run_id = (run_dir / "mlflow_run_id").read_text().strip()
    losses: dict[int, list[float]] = {}
    for m in client.get_metric_history(run_id, "loss"):
        losses.setdefault(m.step, []).append(m.value)
    return losses


def _recipe(folder: Path) -> Path:
    folder.mkdir()
    return write_sft_recipe(
        folder, write_sft_data(folder), checkpoint={"save_freq": 1, "keep_last": 2}
    )


def test_sigkill_during_checkpoint_write_then_resume_matches_uninterrupted(tmp_path):
    # The uninterrupted reference trains alongside (the machine's cores are otherwise idle
    # while the killed run starts up); its own folder, the same recipe.
    reference_log = tmp_path / "reference.log"
    reference = _start_train(_recipe(tmp_path / "reference"), reference_log, {})
    try:
        _kill_resume_and_compare(tmp_path, reference, reference_log)
    finally:
        if reference.poll() is None:
            _kill_group(reference)


def _kill_resume_and_compare(tmp_path: Path, reference: subprocess.Popen, reference_log: Path):
    from mua.models.merge import find_checkpoints
    from mua.models.merge_checkpoint import merge_checkpoint
    from mua.train.checkpoint import latest_checkpoint, list_checkpoints

    recipe = _recipe(tmp_path / "killed")
    run_dir = tmp_path / "killed" / "run"
    log = tmp_path / "killed.log"
    proc = _start_train(recipe, log, {"MUA_TEST_CHECKPOINT_DELAY_S": str(WRITE_HOLD_S)})
    _wait_for_write_in_progress(proc, run_dir / "checkpoints", log, timeout_s=120)
    ranks = _rank_pids(run_dir)
    _kill_group(proc)
    survivors = _wait_gone(ranks, timeout_s=10)
    for pid in survivors:  # never leave a rank running on, whatever the assertions say
        os.kill(pid, signal.SIGKILL)
    assert proc.returncode == -signal.SIGKILL
    assert len(ranks) == int(RANKS)
    assert not survivors, f"ranks {survivors} outlived the SIGKILL of their torchrun"

    # What the kill left: step 2 complete, step 3 only under its temporary name.
    partial = run_dir / "checkpoints" / f".tmp-global_step_{KILL_AT_STEP}"
    assert partial.is_dir()
    assert not (run_dir / "checkpoints" / f"global_step_{KILL_AT_STEP}").exists()
    assert [s for s, _ in list_checkpoints(run_dir)] == [1, 2]
    assert latest_checkpoint(run_dir).name == "global_step_2"
    assert [s for s, _ in find_checkpoints(run_dir)] == [1, 2]  # what `mua merge` would read
    step2 = run_dir / "checkpoints" / "global_step_2"
    merged = merge_checkpoint(2, step2, tmp_path / "merged2", verify=True)
    assert merged.max_logit_diff is not None and merged.max_logit_diff <= 1e-6

    resumed = run_train(recipe, "--nproc-per-node", RANKS)  # the same command, no test hook
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"resumed from {step2} (step 2)" in resumed.stdout + resumed.stderr
    assert not partial.exists()
    assert [s for s, _ in list_checkpoints(run_dir)] == [3, 4]

    assert reference.wait(timeout=300) == 0, reference_log.read_text()[-3000:]
    ref_run = tmp_path / "reference" / "run"
    ref_loss = metric_history(ref_run, "loss")
    assert len(ref_loss) == 4 and ref_loss[0] != ref_loss[-1]
    losses = _losses_by_step(
        run_dir
    )  # step 3 ran twice (before the kill, after the resume): stored once
    assert sorted(losses) == [1, 2, 3, 4] and all(len(v) == 1 for v in losses.values())
    for step, values in losses.items():
        for value in values:
            assert abs(value - ref_loss[step - 1]) <= 1e-6, (step, value, ref_loss[step - 1])
    want, got = final_params(ref_run), final_params(run_dir)
    assert want.keys() == got.keys()
    assert max(float((want[k] - got[k]).abs().max()) for k in want) <= 1e-6
