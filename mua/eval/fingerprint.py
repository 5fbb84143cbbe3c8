"""Content fingerprints for resuming an evaluation: the model's files and each task's row.

A resumed evaluation may reuse earlier results only if it would evaluate the same thing, so the
fingerprint covers content, not names:

- a model or tokenizer folder: the SHA-256 of every top-level file (weights, config, tokenizer,
  chat template), streamed in full; `merge_info.json` and hidden files are bookkeeping and left
  out. Files are hashed in parallel threads. `HashCache` remembers each file's digest under its
  stat signature (device, inode, size, mtime and ctime in ns): any write or replacement changes
  the ctime or the inode, which user space cannot set back, so a resumed evaluation of an
  unchanged folder re-reads nothing while a retrained or copied-over model is hashed again.
  As in git's "racily clean" rule, an entry is trusted only when the file's ctime was at least
  `RACY_MARGIN_NS` older than the moment it was hashed, since file timestamps are coarse (a
  rewrite within the same clock tick would keep the ctime);
- `tiny:<preset>`: the name (the tiny models are built deterministically from it); other names
  (an API model, `expert`) are their own fingerprint;
- a task: the SHA-256 of its canonical row (`task_digest`), stored in every result row, so a
  re-prepared task file invalidates exactly the rows of tasks that changed.

Deliberately not here: deciding what to do on a mismatch (`mua.eval.store`, `mua.eval.session`).
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

SKIPPED_FILES = ("merge_info.json",)
CHUNK_BYTES = 8 << 20
MAX_HASH_THREADS = 8
RACY_MARGIN_NS = 2_000_000_000  # above the coarsest file timestamp granularity in use (2 s)


def task_digest(task) -> str:
    """SHA-256 (hex, 16 chars) of a task's canonical row: id, gym, prompt, payload, source."""
    row = task.to_row()
    row.pop("split", None)  # the same task under another split name is the same task
    text = json.dumps(row, sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK_BYTES):
            digest.update(chunk)
    return digest.hexdigest()


def _signature(stat: os.stat_result) -> list[int]:
    return [stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns]


class HashCache:
    """{absolute path: (stat signature, sha256)} kept in a JSON file (see the module docstring)."""

    def __init__(self, path: Path | None):
        self.path = path
        self.entries: dict[str, dict] = {}
        if path is not None and path.is_file():
            try:
                self.entries = dict(json.loads(path.read_text()))
            except (OSError, ValueError, TypeError):
                self.entries = {}  # a cache: losing it only costs time

    def digest(self, file: Path) -> str:
        key = str(file.resolve())
        signature = _signature(file.stat())
        hit = self.entries.get(key)
        if (
            hit is not None
            and hit.get("stat") == signature
            and signature[4] + RACY_MARGIN_NS <= hit.get("hashed_at_ns", 0)
        ):
            return hit["sha256"]
        hashed_at = time.time_ns()
        value = file_sha256(file)
        if _signature(file.stat()) == signature:  # not written while being read
            self.entries[key] = {"stat": signature, "sha256": value, "hashed_at_ns": hashed_at}
        return value

    def save(self) -> None:
        if self.path is None:
            return
        tmp = self.path.with_name(f".{self.path.name}.tmp{os.getpid()}")
        tmp.write_text(json.dumps(self.entries, indent=1, sort_keys=True) + "\n")
        os.replace(tmp, self.path)


def folder_digest(folder: str | Path, cache: HashCache | None = None) -> dict[str, str]:
    """{file name: sha256} of the top-level files that make up a model or tokenizer folder."""
    cache = cache or HashCache(None)
    root = Path(folder)
    files = sorted(
        p
        for p in root.iterdir()
        if p.is_file() and not p.name.startswith(".") and p.name not in SKIPPED_FILES
    )
    threads = max(1, min(MAX_HASH_THREADS, len(files), os.cpu_count() or 1))
    with ThreadPoolExecutor(threads) as pool:  # hashlib releases the GIL on large buffers
        digests = list(pool.map(cache.digest, files))
    return {p.name: d for p, d in zip(files, digests, strict=True)}


def source_fingerprint(name: str | None, cache: HashCache | None = None) -> dict | str | None:
    """A model or tokenizer source: a folder's file digests, else the name itself."""
    if not name:
        return None
    path = Path(name).expanduser()
    if path.is_dir():
        return {"files": folder_digest(path, cache)}
    if path.is_file():
        cache = cache or HashCache(None)
        return {"files": {path.name: cache.digest(path)}}
    return name
