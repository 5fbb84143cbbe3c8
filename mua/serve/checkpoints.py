"""Serve the local checkpoints a recipe names as endpoints, for as long as a verb runs.

An endpoint may say `checkpoint: runs/x/hf/final` instead of `base_url`; `serving(folders)` starts
one greedy-stable `mua serve` per distinct folder on 127.0.0.1 (one request at a time, so a reply
does not depend on what else was asked), names the addresses in `$MUA_SERVED_CHECKPOINTS` and stops
them when the verb ends. `python -m mua.serve.checkpoints FOLDER URL_FILE` is one such server.
Not here: which folders a run names (`mua.run.preflight`), which requests go to a server.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from mua.config.endpoint import SERVED_CHECKPOINTS_ENV
from mua.errors import RunFailure, UsageError

START_TIMEOUT_S = 300.0


def checkpoints_in(tree) -> list[str]:
    """The distinct `checkpoint:` folders in `tree` (dicts and lists, or a pydantic model), in
    order: every section whose `checkpoint` is a folder path, whatever its other keys (an LLM
    user, a judge, a fixed agent); the recipe's `checkpoint:` settings are a section, not a path."""
    found: list[str] = []

    def walk(node) -> None:
        if isinstance(node, dict):
            value = node.get("checkpoint")
            if isinstance(value, str) and value not in found:
                found.append(value)
            for child in node.values():
                walk(child)
        elif isinstance(node, list):
            for child in node:
                walk(child)

    walk(tree.model_dump() if hasattr(tree, "model_dump") else tree)
    return found


def _check_folder(path: str) -> None:
    folder = Path(path)
    if not folder.is_dir() or not (folder / "config.json").is_file():
        raise UsageError(
            f"checkpoint {path}: no model folder there (it needs config.json); give an HF export "
            "such as runs/<run>/hf/final (`mua merge` writes one per checkpoint)"
        )


def _start(path: str, url_file: Path, log) -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    return subprocess.Popen(
        [sys.executable, "-m", "mua.serve.checkpoints", path, str(url_file)],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
    )


def _wait_url(proc: subprocess.Popen, url_file: Path, path: str, log_path: Path) -> str:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if url_file.is_file() and url_file.read_text().strip():
            return url_file.read_text().strip()
        if proc.poll() is not None:
            tail = log_path.read_text(errors="replace").strip().splitlines()[-1:] or ["no output"]
            raise RunFailure(f"serving checkpoint {path} failed: {tail[0]}")
        time.sleep(0.1)
    raise RunFailure(f"serving checkpoint {path}: no answer after {START_TIMEOUT_S:.0f} s")


@contextlib.contextmanager
def serving(paths: list[str]):
    """Serve the checkpoint folders `paths` (see the module docstring) while the block runs."""
    if not paths:
        yield {}
        return
    for path in paths:
        _check_folder(path)
    procs: list[subprocess.Popen] = []
    previous = os.environ.get(SERVED_CHECKPOINTS_ENV)
    with tempfile.TemporaryDirectory(prefix="mua-served-") as tmp:
        try:
            served: dict[str, str] = json.loads(previous or "{}")
            for i, path in enumerate(paths):
                url_file, log_path = Path(tmp) / f"{i}.url", Path(tmp) / f"{i}.log"
                with open(log_path, "w") as log:
                    procs.append(_start(path, url_file, log))
                served[os.path.abspath(path)] = _wait_url(procs[-1], url_file, path, log_path)
            os.environ[SERVED_CHECKPOINTS_ENV] = json.dumps(served)
            yield served
        finally:
            for proc in procs:
                proc.terminate()
            for proc in procs:
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            if previous is None:
                os.environ.pop(SERVED_CHECKPOINTS_ENV, None)
            else:
                os.environ[SERVED_CHECKPOINTS_ENV] = previous


def _serve(path: str, url_file: str) -> None:
    """One server: the checkpoint at `path`, its base URL written to `url_file`."""
    from mua.processes import die_with_parent
    from mua.serve import serve_model

    die_with_parent()
    server = serve_model(path, port=0, max_batch_size=1)
    tmp = url_file + ".tmp"
    Path(tmp).write_text(f"{server.url}/v1")
    os.replace(tmp, url_file)
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    _serve(sys.argv[1], sys.argv[2])
