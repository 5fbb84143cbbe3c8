"""Readers for the public tau-bench data (MIT licence): databases, policies and tasks, checked.

The layout read is the public one: a folder per domain holding the database tables
(retail: orders.json, products.json, users.json; airline: flights.json, reservations.json,
users.json), `policy.md` and `tasks_<split>.json` (retail: train 500, dev 20, test 115;
airline: test 50). `source` may be the domain folder itself or the folder above it.
Bad input raises `mua.errors.UsageError` with one line naming the file and the problem.

Deliberately not here: prompts, task ids and the in-memory database (gyms/tau builds those).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from mua.errors import UsageError

DOMAINS = ("retail", "airline")
TABLES = {
    "retail": ("orders", "products", "users"),
    "airline": ("flights", "reservations", "users"),
}
SPLIT_FILES = {
    "retail": {"train": "tasks_train.json", "dev": "tasks_dev.json", "test": "tasks_test.json"},
    "airline": {"test": "tasks_test.json"},
}
POLICY_FILE = "policy.md"


def domain_dir(source: str | Path, domain: str) -> Path:
    """The folder holding `domain`'s files: `source` itself or `source/<domain>`."""
    if domain not in DOMAINS:
        raise UsageError(
            f"tau: unknown domain {domain!r}; use gym.options.domain: retail or airline"
        )
    path = Path(source).expanduser()
    if not path.exists():
        raise UsageError(
            f"{path}: not found; pass the tau-bench data folder (holding retail/ and airline/)"
        )
    for candidate in (path / domain, path):
        if (
            candidate.is_dir()
            and (candidate / "users.json").is_file()
            and (candidate / TABLES[domain][0]).with_suffix(".json").is_file()
        ):
            return candidate.resolve()
    raise UsageError(
        f"{path}: no {domain} data here; expected {domain}/{TABLES[domain][0]}.json and {domain}/users.json under it"
    )


def _load_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UsageError(f"{path}: file missing from the tau-bench data folder") from None
    except json.JSONDecodeError as e:
        raise UsageError(f"{path}: not valid JSON (line {e.lineno}: {e.msg})") from None
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"{path}: cannot read ({e})") from None


def read_tables(folder: Path, domain: str) -> dict[str, dict[str, dict]]:
    """The domain database: table name -> {id: record}, as in the public files."""
    tables = {}
    for table in TABLES[domain]:
        path = folder / f"{table}.json"
        data = _load_json(path)
        if not isinstance(data, dict):
            raise UsageError(
                f"{path}: expected a JSON object of records keyed by id, got {type(data).__name__}"
            )
        bad = next((k for k, v in data.items() if not isinstance(v, dict)), None)
        if bad is not None:
            raise UsageError(
                f"{path}: record {bad!r} is {type(data[bad]).__name__}, expected an object"
            )
        tables[table] = data
    return tables


def read_policy(folder: Path) -> str:
    path = folder / POLICY_FILE
    try:
        text = path.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        raise UsageError(
            f"{path}: policy file missing; the agent's system prompt is read from it"
        ) from None
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"{path}: cannot read ({e})") from None
    if not text:
        raise UsageError(f"{path}: policy file is empty")
    return text


def _check_task(path: Path, i: int, row: Any, user_ids: set[str] | None) -> dict:
    if not isinstance(row, dict):
        raise UsageError(f"{path}: task {i} is {type(row).__name__}, expected an object")
    for name, kind in (("user_id", str), ("instruction", str), ("actions", list)):
        if not isinstance(row.get(name), kind):
            raise UsageError(f"{path}: task {i}: field {name!r} missing or not a {kind.__name__}")
    outputs = row.get("outputs", [])
    if not isinstance(outputs, list) or not all(isinstance(o, str) for o in outputs):
        raise UsageError(f"{path}: task {i}: 'outputs' must be a list of strings")
    for j, action in enumerate(row["actions"]):
        if not (
            isinstance(action, dict)
            and isinstance(action.get("name"), str)
            and isinstance(action.get("kwargs", {}), dict)
        ):
            raise UsageError(
                f"{path}: task {i}: action {j} must be an object with 'name' and 'kwargs'"
            )
    if user_ids is not None and row["user_id"] not in user_ids:
        raise UsageError(
            f"{path}: task {i}: user id {row['user_id']!r} is not in users.json; fix the task or the database"
        )
    actions = [{"name": a["name"], "kwargs": a.get("kwargs", {})} for a in row["actions"]]
    return {
        "user_id": row["user_id"],
        "instruction": row["instruction"],
        "actions": actions,
        "outputs": list(outputs),
    }


def read_tasks(
    folder: Path, domain: str, user_ids: set[str] | None = None
) -> dict[str, list[dict]]:
    """split -> checked task dicts (user_id, instruction, actions, outputs); absent split files are skipped.

    With `user_ids` (the database's users), a task naming any other user is an error.
    """
    out = {}
    for split, name in SPLIT_FILES[domain].items():
        path = folder / name
        if not path.exists():
            continue
        data = _load_json(path)
        if not isinstance(data, list):
            raise UsageError(f"{path}: expected a JSON list of tasks, got {type(data).__name__}")
        out[split] = [_check_task(path, i, row, user_ids) for i, row in enumerate(data)]
    if not out:
        expected = ", ".join(SPLIT_FILES[domain].values())
        raise UsageError(f"{folder}: no task files found; expected one of {expected}")
    return out
