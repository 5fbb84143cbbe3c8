"""Every verb's output folder is locked while in use, as the training run dir is: a second
`mua eval` into one `--out` (and likewise `mua rollout`, `mua prep`, `mua merge`) is refused with
one line naming the folder and the holder (exit 2), nothing written; once the holder is gone the
same command works and leaves the lock released (`mua prep` and `mua merge`, whose output is
one-shot, leave no lock file behind)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from mua.output_folders import LOCK

# Another command holding a folder's lock, as `mua eval` (etc.) holds it while it writes.
_HOLD = (
    "import sys, time; from mua.output_folders import FolderLock; "
    "FolderLock(sys.argv[1], what='folder', verb=sys.argv[2], lock_file=sys.argv[3] or None); "
    "print('locked', flush=True); time.sleep(120)"
)


class _Holder:
    def __init__(self, folder: Path, verb: str, lock_file: Path | None = None):
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _HOLD, str(folder), verb, str(lock_file or "")],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout.readline().strip() == "locked"

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.proc.kill()
        self.proc.wait()


def _one_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, lines
    return lines[0]


@pytest.fixture(scope="module")
def guess_tasks(tmp_path_factory) -> Path:
    from mua.gym.prep import build_and_write

    folder = tmp_path_factory.mktemp("tasks") / "guess"
    build_and_write("guess", folder, options={"max_number": 4})
    return folder


def _eval_args(tasks: Path, out: Path) -> list[str]:
    return [
        "eval",
        "gym.name=guess",
        f"data.test_files=[{tasks / 'test.parquet'}]",
        "eval.n=1",
        "--model",
        "expert",
        "--out",
        str(out),
    ]


def _verb_args(verb: str, tasks: Path, out: Path) -> list[str]:
    if verb == "mua eval":
        return _eval_args(tasks, out)
    if verb == "mua rollout":
        return ["rollout", "policy=expert", "gym.name=guess", "data.max_tasks=2", f"run_dir={out}"]
    return ["prep", "--gym", "guess", "--option", "max_number=4", "--out", str(out)]


@pytest.mark.parametrize("verb", ["mua eval", "mua rollout", "mua prep"])
def test_a_second_command_into_a_folder_in_use_is_refused(tmp_path, mua_cli, guess_tasks, verb):
    out = tmp_path / "out"
    args = _verb_args(verb, guess_tasks, out)
    with _Holder(out, verb) as holder:
        code, _, err = mua_cli(*args)
        line = _one_line(err)
        assert code == 2, err
        assert str(out) in line and f"in use by another `{verb}` (pid {holder.proc.pid}" in line
        assert sorted(p.name for p in out.iterdir() if p.name != ".mua-dir") == [LOCK]
    code, _, err = mua_cli(*args)  # the holder is gone: the same command works
    assert code == 0, err[-2000:]
    if verb == "mua prep":  # a one-shot output: the lock file goes with the lock
        assert not (out / LOCK).exists()
    else:
        assert (out / LOCK).read_text() == ""  # released at the end


def test_a_merge_into_a_folder_in_use_is_refused(tmp_path):
    from mua.errors import UsageError
    from mua.models import load_model, load_tokenizer
    from mua.models.merge_checkpoint import merge_checkpoint
    from tests.integration.train_helpers import write_dcp_checkpoint

    step_dir = tmp_path / "run" / "checkpoints" / "global_step_2"
    write_dcp_checkpoint(load_model("tiny:qwen3-1m"), step_dir, load_tokenizer("tiny:qwen3-1m"))
    out = tmp_path / "merged" / "global_step_2"
    beside = out.parent / f".{out.name}{LOCK}"  # the folder is replaced whole: its lock is beside
    with _Holder(out, "mua merge", beside), pytest.raises(UsageError) as refused:
        merge_checkpoint(2, step_dir, out)
    assert f"merge output folder {out} is in use by another `mua merge`" in str(refused.value)
    assert not out.exists()
    assert not merge_checkpoint(2, step_dir, out).skipped
    assert (out / "merge_info.json").is_file() and not beside.exists()  # no lock file left
    assert not [p for p in out.parent.iterdir() if p.name.endswith(LOCK)]


def test_a_lock_file_deleted_by_its_holder_meanwhile_is_never_held(tmp_path, monkeypatch):
    """A command opens the lock file, the holder releases (deleting it) before the command locks
    it: the command must not hold the deleted file (a third command would lock a new one beside
    it) but lock the file the path names."""
    import os

    from mua import output_folders
    from mua.output_folders import FolderLock

    out = tmp_path / "out"
    holder = FolderLock(out, what="folder", verb="mua prep", remove_on_release=True)
    real_flock = output_folders.fcntl.flock
    released = []

    def flock_after_release(fd, op):
        if op & output_folders.fcntl.LOCK_EX and not released:
            released.append(True)
            holder.release()  # between the command's open and its lock
        return real_flock(fd, op)

    monkeypatch.setattr(output_folders.fcntl, "flock", flock_after_release)
    second = FolderLock(out, what="folder", verb="mua prep", remove_on_release=True)
    assert released and (out / LOCK).exists()
    assert os.fstat(second.fd).st_ino == os.stat(out / LOCK).st_ino
    second.release()
    assert not (out / LOCK).exists()
