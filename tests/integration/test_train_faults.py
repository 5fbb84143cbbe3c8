"""`mua train` under faults, end to end under torchrun: a damaged checkpoint is named (and an
earlier one can be chosen), NaN weights stop the run before anything is exported, `merge --verify`
refuses them, Ctrl-C exits 130 with one line, and a run with nothing to learn says so and stops."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from tests.integration.grpo_helpers import shared_guess_setup, write_rl_recipe
from tests.integration.train_helpers import (
    REPO,
    run_train,
    write_sft_data,
    write_sft_recipe,
)

pytestmark = pytest.mark.integration


def _lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


@pytest.fixture(scope="module")
def two_checkpoints(tmp_path_factory):
    """An SFT run dir with checkpoints global_step_1 and global_step_2 (kept as a pristine copy)."""
    folder = tmp_path_factory.mktemp("faults")
    recipe = write_sft_recipe(folder, write_sft_data(folder), total_steps=2)
    res = run_train(recipe)
    assert res.returncode == 0, res.stderr[-3000:]
    return folder


def _copy_run(source, tmp_path):
    """A fresh copy of the module's run (its recipe points at run_dir under tmp_path)."""
    shutil.copytree(source / "run", tmp_path / "run")
    shutil.copy(source / "sft.jsonl", tmp_path / "sft.jsonl")
    recipe = write_sft_recipe(tmp_path, tmp_path / "sft.jsonl", total_steps=3)
    # the resolved recipe names the original run dir and data: rewrite it as this copy's own
    from mua.config import load_recipe, write_resolved

    write_resolved(load_recipe(str(recipe), ["total_steps=2"], verb="train"), tmp_path / "run")
    return recipe, tmp_path / "run" / "checkpoints"


def _middle_of_largest_layer_weight(step_dir):
    """(shard file, byte offset) in the middle of the largest decoder-layer weight's stored bytes
    (not the embedding: a tied LM head would load over it)."""
    from torch.distributed.checkpoint import FileSystemReader

    storage = FileSystemReader(str(step_dir)).read_metadata().storage_data
    _, info = max(
        ((i, s) for i, s in storage.items() if i.fqn.startswith("model.model.layers.")),
        key=lambda item: item[1].length,
    )
    return step_dir / info.relative_path, info.offset + info.length // 2 - 32768


def _overwrite(path, offset: int, data: bytes) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(data)


def test_a_damaged_checkpoint_is_named_and_the_previous_one_can_be_chosen(
    two_checkpoints, tmp_path
):
    recipe, ckpts = _copy_run(two_checkpoints, tmp_path)
    shard = next((ckpts / "global_step_2").glob("*.distcp"))
    _overwrite(shard, 64, b"\x7f" * 4096)  # finite garbage (3.4e38), same size
    res = run_train(recipe)
    assert res.returncode == 1
    (line,) = _lines(res.stderr)
    assert "global_step_2 is damaged" in line and "--resume-from global_step_1" in line
    assert "Traceback" not in res.stdout + res.stderr
    res = run_train(recipe, "--resume-from", "global_step_1")
    assert res.returncode == 0, res.stderr[-3000:]
    assert "global_step_1 (step 1)" in res.stdout


@pytest.mark.parametrize("damage", ["truncated shard", "no .metadata"])
def test_a_broken_checkpoint_without_checksums_gives_one_line(two_checkpoints, tmp_path, damage):
    """Checkpoints of older versions carry no checksums: the load failure still names them."""
    recipe, ckpts = _copy_run(two_checkpoints, tmp_path)
    step2 = ckpts / "global_step_2"
    (step2 / "checksums.json").unlink()
    if damage == "truncated shard":
        shard = next(step2.glob("*.distcp"))
        shard.write_bytes(shard.read_bytes()[: shard.stat().st_size // 2])
    else:
        (step2 / ".metadata").unlink()
    res = run_train(recipe)
    assert res.returncode == 1
    (line,) = _lines(res.stderr)
    assert f"checkpoint {step2}" in line and "damaged" in line


def test_nan_weights_stop_the_run_and_merge_verify_refuses_them(two_checkpoints, tmp_path):
    """A checkpoint holding NaN (what overwriting a shard with 0xff gives, written by a version
    without checksums): the resumed run stops at its first loss, exports nothing, and its MLflow
    run is FAILED; `mua merge --verify` refuses the checkpoint."""
    from mlflow.tracking import MlflowClient

    recipe, ckpts = _copy_run(two_checkpoints, tmp_path)
    step2 = ckpts / "global_step_2"
    (step2 / "checksums.json").unlink()
    shard, middle = _middle_of_largest_layer_weight(step2)
    _overwrite(shard, middle, b"\xff" * 65536)
    shutil.rmtree(tmp_path / "run" / "hf")  # the copied run's own export
    res = run_train(recipe)
    assert res.returncode == 1, res.stdout[-2000:]
    (line,) = _lines(res.stderr)
    assert "step 3: the policy loss or gradient is not finite" in line
    run = tmp_path / "run"
    assert not (run / "hf" / "final").exists() and not (ckpts / "global_step_3").exists()
    client = MlflowClient(f"sqlite:///{run.resolve() / 'mlflow.db'}")
    run_id = (run / "mlflow_run_id").read_text().strip()
    assert client.get_run(run_id).info.status == "FAILED"

    merged = subprocess.run(
        [
            sys.executable,
            "-m",
            "mua.cli.main",
            "merge",
            str(step2),
            "--verify",
            "--out",
            str(tmp_path / "merged"),
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert merged.returncode == 1
    assert "NaN or infinite" in _lines(merged.stderr)[-1]


def test_ctrl_c_exits_130_with_one_line_and_the_run_resumes(tmp_path):
    recipe = write_sft_recipe(
        tmp_path,
        write_sft_data(tmp_path, num=64),
        total_steps=400,
        algo={"kind": "sft", "batch_size": 2, "epochs": 100},
    )
    env = {**os.environ, "OMP_NUM_THREADS": "1", "COLUMNS": "200"}
    env.pop("MLFLOW_TRACKING_URI", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "mua.cli.main", "train", str(recipe)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env=env,
        start_new_session=True,
    )
    deadline = time.monotonic() + 300
    for line in proc.stdout:  # wait for a checkpoint, as a user would see steps go by
        if "step 2/" in line or time.monotonic() > deadline:
            break
    os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in a terminal does
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err[-3000:]
    (line,) = _lines(err)
    assert "interrupted" in line and "run the same command again to resume" in line
    assert (tmp_path / "run" / "checkpoints").is_dir()
    assert not (tmp_path / "run" / ".mua-run.lock").read_text()  # released


def test_a_run_with_nothing_to_learn_says_so_and_stops(tmp_path_factory, tmp_path):
    model, train, _ = shared_guess_setup(tmp_path_factory)
    recipe = write_rl_recipe(
        tmp_path,
        model,
        train,
        rollout={"max_total_tokens": 54},  # a 51-token prompt: every first reply is cut
        algo={"kind": "grpo", "mask_truncated": True},
        stop={"empty_steps": 2},
        total_steps=5,
    )
    res = run_train(recipe)
    assert res.returncode == 1
    said = [line for line in res.stdout.splitlines() if "nothing to learn from" in line]
    assert len(said) == 2 and "16 of 16 trajectories excluded" in said[0], res.stdout[-2000:]
    # (transformers draws its weight-loading bars on stderr for a model folder)
    (line,) = [line for line in _lines(res.stderr) if "Loading weights" not in line]
    assert "stopped after 2 steps in a row with nothing to learn from" in line


def _start_train(recipe, *args: str) -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "COLUMNS": "200"}
    env.pop("MLFLOW_TRACKING_URI", None)
    return subprocess.Popen(
        [sys.executable, "-m", "mua.cli.main", "train", str(recipe), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env=env,
        start_new_session=True,  # like a job's launcher: a signal to it alone, not to a group
    )


def _wait_for_step(proc: subprocess.Popen, step: int, timeout_s: float = 300) -> None:
    deadline = time.monotonic() + timeout_s
    for line in proc.stdout:  # as a user would see the steps go by
        if f"step {step}/" in line or time.monotonic() > deadline:
            return


def _run_processes(run_dir) -> dict[int, str]:
    """{pid: "torchrun" or "rank"} of the processes of `run_dir`'s training."""
    from pathlib import Path

    found = {}
    for proc_dir in Path("/proc").iterdir():
        if not proc_dir.name.isdigit():
            continue
        try:
            argv = (proc_dir / "cmdline").read_bytes().split(b"\0")
            state = (proc_dir / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state == "Z" or str(run_dir).encode() not in argv or b"mua.train.loop" not in argv:
            continue
        found[int(proc_dir.name)] = "torchrun" if b"mua.train.torchrun" in argv else "rank"
    return found


def _gone_within(run_dir, timeout_s: float) -> dict[int, str]:
    """The run's processes still alive after `timeout_s` (SIGKILLed then, so none outlives a
    failed test)."""
    deadline = time.monotonic() + timeout_s
    while (alive := _run_processes(run_dir)) and time.monotonic() < deadline:
        time.sleep(0.05)
    for pid in alive:
        os.kill(pid, signal.SIGKILL)
    return alive


def _without_library_warnings(text: str) -> list[str]:
    """The lines of `text` without Python warnings (`file:line: XWarning: ...` and the source
    line under it): torch's FSDP2 warns on stderr about the 2-rank model's output view."""
    lines, skip_next = [], False
    for line in _lines(text):
        if skip_next and line.startswith(" "):
            skip_next = False
            continue
        skip_next = "Warning: " in line and ".py:" in line
        if not skip_next:
            lines.append(line)
    return lines


def _stderr_at_exit(proc: subprocess.Popen, run_dir, timeout_s: float) -> str:
    """`proc`'s stderr once it and every process holding its pipes ended; on a timeout (a
    torchrun training on holds them) the run's processes are killed and the test fails."""
    try:
        return proc.communicate(timeout=timeout_s)[1]
    except subprocess.TimeoutExpired:
        left = _gone_within(run_dir, 0)
        proc.kill()
        proc.communicate()
        pytest.fail(f"the run's processes {left} went on after `mua train` ended")


def _preemptible_recipe(tmp_path):
    return write_sft_recipe(
        tmp_path,
        write_sft_data(tmp_path, num=64),
        total_steps=400,
        algo={"kind": "sft", "batch_size": 2, "epochs": 100},
        checkpoint={"save_freq": 100, "keep_last": 2},
    )


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_sigterm_to_mua_train_checkpoints_stops_the_ranks_and_the_run_resumes(tmp_path):
    """What a cluster scheduler does to preempt a job: SIGTERM to the launcher alone."""
    recipe = _preemptible_recipe(tmp_path)
    run_dir = tmp_path / "run"
    proc = _start_train(recipe, "--nproc-per-node", "2")
    _wait_for_step(proc, 3)
    ranks = _run_processes(run_dir)
    proc.send_signal(signal.SIGTERM)
    err = _stderr_at_exit(proc, run_dir, timeout_s=120)
    assert sorted(ranks.values()) == ["rank", "rank", "torchrun"]
    assert not _gone_within(run_dir, 10), "torchrun or a rank outlived `mua train`"
    assert proc.returncode == 143, err[-3000:]
    (line,) = _without_library_warnings(err)
    assert line.startswith("error: stopped by SIGTERM; its latest checkpoint is ")
    assert "run the same command again to resume" in line
    saved = int(line.split("global_step_")[1].split(";")[0])
    assert 3 <= saved < 100  # the step it was in, not a periodic checkpoint (every 100 steps)
    assert not (run_dir / ".mua-run.lock").read_text()  # released
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{run_dir.resolve() / 'mlflow.db'}")
    run_id = (run_dir / "mlflow_run_id").read_text().strip()
    assert client.get_run(run_id).info.status == "KILLED"

    # the requeued job: the same command (here with a nearer end) resumes where it stopped
    res = run_train(recipe, f"total_steps={saved + 2}", "--nproc-per-node", "2")
    assert res.returncode == 0, res.stderr[-3000:]
    assert f"global_step_{saved} (step {saved})" in res.stdout
    from mua.track.run_files import METRICS_FILE

    rows = [json.loads(x) for x in (run_dir / METRICS_FILE).read_text().splitlines()]
    assert [r["step"] for r in rows] == list(range(1, saved + 3))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="parent-death signal")
def test_sigkill_of_mua_train_alone_takes_torchrun_and_the_ranks_with_it(tmp_path):
    """A launcher killed outright (its process only, not its group) leaves nothing training on
    and nothing holding the run dir's lock."""
    from mua.train.run_dir import RunLock

    recipe = _preemptible_recipe(tmp_path)
    run_dir = tmp_path / "run"
    proc = _start_train(recipe)
    _wait_for_step(proc, 2)
    assert sorted(_run_processes(run_dir).values()) == ["rank", "torchrun"]
    proc.kill()
    _stderr_at_exit(proc, run_dir, timeout_s=60)
    assert not _gone_within(run_dir, 10), "torchrun or a rank outlived `mua train`"
    RunLock(run_dir).release()  # free: a requeued job is not refused


@pytest.fixture
def small_disk(tmp_path):
    """A real 20 MiB filesystem (tmpfs), grown later with `grow()`; needs root (mount)."""
    folder = tmp_path / "small"
    folder.mkdir()
    mount = ["mount", "-t", "tmpfs", "-o", "size=20m", "tmpfs", str(folder)]
    if os.geteuid() != 0 or subprocess.run(mount, capture_output=True).returncode != 0:
        pytest.skip("needs root to mount a small tmpfs (a real full disk)")

    def grow() -> None:
        remount = ["mount", "-o", "remount,size=256m", str(folder)]
        subprocess.run(remount, check=True, capture_output=True)

    try:
        yield folder, grow
    finally:
        subprocess.run(["umount", "-l", str(folder)], capture_output=True)


def test_a_full_disk_gives_one_line_and_the_run_resumes_once_there_is_space(tmp_path, small_disk):
    folder, grow = small_disk
    recipe = write_sft_recipe(
        tmp_path,
        write_sft_data(tmp_path),
        total_steps=4,
        run_dir=str(folder / "run"),
        checkpoint={"save_freq": 1, "keep_last": 2},
    )
    res = run_train(recipe)
    assert res.returncode == 1, res.stderr[-3000:]
    (line,) = _lines(res.stderr)  # not MLflow's SQLite traceback from its own failed writes
    assert line.startswith("error: cannot write ") and "no space left on device" in line
    assert line.endswith("free space and run the same command to resume")
    grow()  # space freed
    res = run_train(recipe)
    assert res.returncode == 0, res.stderr[-3000:]
    from mua.track.run_files import METRICS_FILE

    rows = [json.loads(x) for x in (folder / "run" / METRICS_FILE).read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3, 4]  # the redone steps are logged once
