"""Fingerprints for resuming an evaluation: its settings, the model's files and each task's row.

`eval_fingerprint` gathers what can change a conversation or its score (docs/eval.md); model and
tokenizer folders by the SHA-256 of their top-level files, remembered by `HashCache` under each
file's stat signature (trusted only `RACY_MARGIN_NS` after its ctime); a task by the digest of its
canonical row (`task_digest`). `TRANSPORT_KEYS` are left out.
Not here: acting on a mismatch, masking credentials before writing (`mua.eval.store`).
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
# how an endpoint is reached, not what it is asked: left out of an endpoint section's settings
TRANSPORT_KEYS = ("max_concurrency", "timeout_s", "max_retries", "backoff_s")


def eval_fingerprint(recipe, model: str, loaded: str, cache, specs: dict) -> dict:
    """Everything that determines results: settings, each entry's run spec (`specs`: {label:
    `RunSpec`}) and the content of the model and tokenizer."""
    from mua.redact import redact_urls

    r = recipe.rollout
    return {
        "model": model,
        "model_content": source_fingerprint(loaded, cache),
        "tokenizer_content": source_fingerprint(recipe.model.tokenizer, cache),
        "agent_endpoint": redact_urls(r.openai.base_url)
        if model.startswith("openai:") or r.engine == "openai"
        else None,
        "n": recipe.eval.n,
        "temperature": recipe.eval.temperature,
        "top_p": r.top_p,
        "top_k": r.top_k,
        "max_new_tokens_per_turn": r.max_new_tokens_per_turn,
        "max_total_tokens": r.max_total_tokens,
        "max_turns": r.max_turns,
        "seed": recipe.data.seed,
        "success_threshold": recipe.eval.success_threshold,
        "user": without_transport(recipe.user.model_dump(mode="json")),
        # maps by gym (see mua.eval.store.PER_GYM_KEYS): another gym may join the folder
        "gym_options": {g.name: dict(g.options) for g in recipe.gym_sections() if g.options},
        "reward_weights": {
            g.name: dict(g.reward_weights) for g in recipe.gym_sections() if g.reward_weights
        },
        "gyms": {label: spec_settings(spec, cache) for label, spec in specs.items()},
        # only with a user matrix: a plain evaluation's folder stays compatible
        **(
            {
                "users": [
                    u.model_dump(mode="json", exclude=set(TRANSPORT_KEYS))
                    for u in recipe.eval.users
                ]
            }
            if recipe.eval.users
            else {}
        ),
    }


def spec_settings(spec, cache: HashCache | None = None) -> dict:
    """One entry's run spec (`mua.run.spec.RunSpec`) as its fingerprint: its settings, endpoints'
    transport keys left out, with the content of its program's files."""
    settings = spec.to_dict()["settings"]
    files = program_content(spec.program, cache) if spec.program is not None else {}
    if files:
        settings["program_content"] = files
    return without_transport(settings)


def program_content(program: dict, cache: HashCache | None = None) -> dict[str, str]:
    """{path: sha256} of the files a program gym runs: each argument of its command that names
    a file (the script), or the file of its entry point's module."""
    import importlib.util

    if program.get("entry_point") is not None:
        try:
            spec = importlib.util.find_spec(program["entry_point"].partition(":")[0])
        except (ImportError, ValueError):
            spec = None
        files = [spec.origin] if spec is not None and spec.origin else []
    else:
        files = list(program.get("command") or [])
    cache = cache or HashCache(None)
    return {name: cache.digest(Path(name)) for name in files if Path(name).is_file()}


def without_transport(tree):
    """`tree` with `TRANSPORT_KEYS` left out of every endpoint section (a mapping naming
    `api_key_env`) in it; other sections keep theirs (a program's `timeout_s` ends episodes)."""
    if isinstance(tree, list):
        return [without_transport(v) for v in tree]
    if not isinstance(tree, dict):
        return tree
    endpoint = "api_key_env" in tree
    return {
        k: without_transport(v) for k, v in tree.items() if not (endpoint and k in TRANSPORT_KEYS)
    }


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
