"""Checksums of a checkpoint folder: the size and sha256 of every file, written once the folder is
complete, and the check a resume or `mua merge` runs before reading anything.

A folder without `checksums.json` (written before checksums existed, or by hand) is checked only
for DCP's `.metadata`. Does not write or read tensors, and does not decide what a damaged
checkpoint means for the run (`mua.train.checkpoint` does).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

CHECKSUMS = "checksums.json"


def _sha256(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def write_checksums(folder: Path) -> None:
    """Record size and sha256 of every file under `folder` (after all ranks wrote theirs)."""
    sums = {
        str(p.relative_to(folder)): {"size": p.stat().st_size, "sha256": _sha256(p)}
        for p in sorted(folder.rglob("*"))
        if p.is_file() and p.name != CHECKSUMS
    }
    (folder / CHECKSUMS).write_text(json.dumps(sums, indent=1) + "\n")


def checkpoint_problem(path: str | Path) -> str | None:
    """What is wrong with checkpoint `path` (a missing, truncated or altered file), or None when
    every file matches its checksum. A checkpoint without checksums is only checked for DCP's
    `.metadata` (`mua merge` reads nothing else of it)."""
    path = Path(path)
    manifest = path / CHECKSUMS
    if not manifest.exists():  # an older checkpoint (or one written by hand): DCP's index only
        return None if (path / ".metadata").is_file() else ".metadata is missing"
    try:
        sums = json.loads(manifest.read_text())
    except (OSError, ValueError):
        return f"{CHECKSUMS} is unreadable"
    for name, want in sums.items():
        file = path / name
        if not file.is_file():
            return f"{name} is missing"
        size = file.stat().st_size
        if size != want["size"]:
            return f"{name} has {size} bytes, {want['size']} were written (truncated?)"
        if _sha256(file) != want["sha256"]:
            return f"{name} does not match its checksum (overwritten or corrupted)"
    return None
