"""Which folders mua may write into: ones it created (they carry a marker file) or empty ones.

`claim_dir` creates, marks or accepts a folder (`.mua-dir`) and refuses any other with a
`UsageError`; `claim_fresh_dir` empties a previous output of the same command; `claim_file` takes
a single file the verb recognises as its own. `FolderLock` is an exclusive `flock` on
`.mua-run.lock` held while the process lives, taken over from a dead holder, named in a refusal
(docs/training.md, "Folders, locks and credentials"). Not here: deciding what to write.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import socket
import time
from collections.abc import Callable
from pathlib import Path

from mua.errors import UsageError

MARKER = ".mua-dir"
LOCK = ".mua-run.lock"


def is_claimed(path: str | Path) -> bool:
    """True when `path` carries mua's marker file."""
    return (Path(path) / MARKER).is_file()


def mark_dir(path: str | Path, what: str = "output") -> Path:
    """Write the marker into `path` (which must exist); keeps an existing marker unchanged."""
    marker = Path(path) / MARKER
    if not marker.is_file():
        record = {"written_by": f"mua {what}", "created_at": time.strftime("%Y-%m-%dT%H:%M:%S")}
        tmp = marker.with_name(f"{MARKER}.tmp{os.getpid()}")
        tmp.write_text(json.dumps(record, sort_keys=True) + "\n")
        os.replace(tmp, marker)
    return marker


def claim_dir(path: str | Path, *, what: str, legacy_proof: tuple[str, ...] = ()) -> Path:
    """Make `path` a folder mua may write into, or raise UsageError (see the module docstring).

    `what` names the folder in the message and the marker (e.g. "eval output", "run_dir").
    """
    folder = Path(path).expanduser()
    if folder.exists() and not folder.is_dir():
        raise UsageError(f"{what} {folder}: exists and is not a folder; choose another path")
    if not folder.exists():
        folder.mkdir(parents=True, exist_ok=True)
        mark_dir(folder, what)
        return folder
    if is_claimed(folder):
        return folder
    entries = [p for p in folder.iterdir() if p.name != LOCK]
    if not entries or any((folder / name).exists() for name in legacy_proof):
        mark_dir(folder, what)
        return folder
    raise UsageError(
        f"{what} {folder} already holds files mua did not write ({_listing(entries)}); choose a "
        f"new or empty folder, or, if mua did write them, add the marker with "
        f"`touch {folder / MARKER}`"
    )


def _listing(entries: list[Path]) -> str:
    """The first three names of `entries`, sorted, and "..." when there are more."""
    return ", ".join(sorted(p.name for p in entries)[:3]) + (", ..." if len(entries) > 3 else "")


def marked_by(path: str | Path) -> str | None:
    """Who wrote `path` by its marker ("mua <what>" of `claim_dir`), or None (no marker, or one
    without that record)."""
    try:
        record = json.loads((Path(path) / MARKER).read_text())
    except (OSError, ValueError):
        return None
    return record.get("written_by") if isinstance(record, dict) else None


def claim_fresh_dir(path: str | Path, *, what: str, writer: str, fix: str) -> Path:
    """A folder for a command that starts afresh each time (the demo): a new or empty folder, or
    one an earlier run of the same command claimed as `what`, emptied (its marker kept). Any
    other folder is refused with a UsageError: "`what` PATH already holds files `writer` did not
    write (names); `fix`"."""
    folder = Path(path).expanduser()
    if not folder.is_dir():
        return claim_dir(folder, what=what)
    ours = marked_by(folder) == f"mua {what}"
    entries = [p for p in folder.iterdir() if p.name not in (LOCK, MARKER)]
    if entries and not ours:
        raise UsageError(
            f"{what} {folder} already holds files {writer} did not write "
            f"({_listing(entries)}); {fix}"
        )
    for entry in entries:
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()
    if not ours:  # empty but for another command's marker (or an unreadable one): ours now
        (folder / MARKER).unlink(missing_ok=True)
    return claim_dir(folder, what=what)


def claim_file(path: str | Path, *, what: str, ours: Callable[[Path], bool]) -> Path:
    """Make `path` a file mua may write, or raise UsageError: it must be new, or one that
    `ours(path)` recognises as written by mua. A missing folder is created with `claim_dir`."""
    file = Path(path).expanduser()
    if file.is_dir():
        raise UsageError(f"{what} {file}: is a folder; give a file path")
    if not file.parent.exists():
        claim_dir(file.parent, what=f"{what} folder")
    if file.exists() and not ours(file):
        raise UsageError(
            f"{what} {file}: a file mua did not write is there; choose another path (--out)"
        )
    return file


class FolderLock:
    """An exclusive lock on `folder` (created when missing) for this process and the processes it
    starts with the descriptor (`fd`, for `subprocess.Popen(pass_fds=...)`), or a UsageError
    naming the holder. `what` names the folder and `verb` this command in the messages;
    `lock_file` replaces `folder/.mua-run.lock` where the folder itself is replaced whole.
    `remove_on_release`: a clean release deletes the lock file (a one-shot command's output, such
    as `mua prep`'s or `mua merge`'s, keeps no trace of it); the lock taken is always checked to
    be on the file the path names, so a file another command deleted meanwhile is never held."""

    def __init__(
        self,
        folder: str | Path,
        *,
        what: str,
        verb: str,
        lock_file: str | Path | None = None,
        remove_on_release: bool = False,
    ):
        folder = Path(folder).expanduser()
        if folder.exists() and not folder.is_dir():
            raise UsageError(f"{what} {folder}: exists and is not a folder; choose another path")
        self.path = Path(lock_file) if lock_file is not None else folder / LOCK
        self.remove_on_release = remove_on_release
        self.path.parent.mkdir(parents=True, exist_ok=True)
        for _ in range(100):  # a holder that deletes the file on release makes us open it again
            self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder, holder_verb = _read_holder(self.fd)
                os.close(self.fd)
                raise UsageError(
                    f"{what} {folder} is in use by another `{holder_verb or verb}` ({holder}); "
                    f"wait for it to end or give another {what}"
                ) from None
            if _same_file(self.fd, self.path):
                break
            os.close(self.fd)  # locked a file its holder deleted on release: take the new one
        previous, _ = _read_holder(self.fd)
        if previous != "unknown process":
            print(f"{what} {folder}: took over the lock of {previous}, which is gone", flush=True)
        os.ftruncate(self.fd, 0)
        record = {
            "verb": verb,
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "started": time.time(),
        }
        os.pwrite(self.fd, (json.dumps(record) + "\n").encode(), 0)

    def release(self) -> None:
        if self.fd < 0:
            return
        os.ftruncate(self.fd, 0)  # a clean end leaves no holder to report
        if self.remove_on_release:
            self.path.unlink(missing_ok=True)  # while still held: nobody locks it after this
        fcntl.flock(self.fd, fcntl.LOCK_UN)
        os.close(self.fd)
        self.fd = -1

    def __enter__(self) -> FolderLock:
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def _same_file(fd: int, path: Path) -> bool:
    """True when the open `fd` is the file `path` names now."""
    try:
        here, there = os.fstat(fd), os.stat(path)
    except FileNotFoundError:
        return False
    return (here.st_dev, here.st_ino) == (there.st_dev, there.st_ino)


def _read_holder(fd: int) -> tuple[str, str | None]:
    """("pid P on HOST, started T", verb) of the lock file's record, or ("unknown process", None)."""
    try:
        data = json.loads(os.pread(fd, 4096, 0).decode() or "null")
        started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(data["started"]))
        return f"pid {data['pid']} on {data['host']}, started {started}", data.get("verb")
    except (ValueError, TypeError, KeyError, AttributeError, OSError):
        return "unknown process", None
