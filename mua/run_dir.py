"""Which folders mua may write into: ones it created (they carry a marker file) or empty ones.

Every verb that writes an output folder (`mua train` run dirs, `mua eval --out`, `mua merge`
step folders) calls `claim_dir(path, what=...)` before writing anything. The folder is
created with a marker file (`.mua-dir`) when it does not exist, marked when it exists but is
empty, accepted when it already carries the marker, and otherwise refused with a `UsageError`
(exit 2) that names the folder and the fix. So mua never rewrites or deletes files it did not
write. `legacy_proof` names files whose presence shows an older mua wrote the folder (e.g.
`merge_info.json` in a merged model folder): such a folder is marked and accepted.
A verb that writes one file (`mua view`'s page) calls `claim_file`: a new file (its folder made
and claimed when missing) or one the verb recognises as its own, never another file.
Deliberately not here: locking a folder against concurrent runs, or deciding what to write.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path

from mua.errors import UsageError

MARKER = ".mua-dir"


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
    entries = list(folder.iterdir())
    if not entries or any((folder / name).exists() for name in legacy_proof):
        mark_dir(folder, what)
        return folder
    shown = ", ".join(sorted(p.name for p in entries)[:3]) + (", ..." if len(entries) > 3 else "")
    raise UsageError(
        f"{what} {folder} already holds files mua did not write ({shown}); choose a new or empty "
        f"folder, or, if mua did write them, add the marker with `touch {folder / MARKER}`"
    )


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
