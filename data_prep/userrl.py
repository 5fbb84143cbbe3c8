"""Readers for UserRL's public gym data (Apache-2.0), checked row by row.

Each `read_*` takes either the JSON file itself or any folder above it (for example the
`userrl/` root, searched recursively for the expected file name) and returns plain dicts with
the fields the mua gyms use. Bad input raises `mua.errors.UsageError` with one line naming the
file and the problem. These readers do not build prompts or splits; each gym's `data.py` does.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from mua.errors import UsageError

FILES = {
    "function": "functions.json",
    "telepathy": "all_entities_refined.json",
    "turtle": "all_stories_refined.json",
    "intention_train": "all_intentions_train.json",
    "intention_test": "all_intentions_test.json",
    "search": "questions.json",
}


def locate(source: str | Path, kind: str) -> Path:
    """The data file for `kind` at `source` (the file, or a folder containing it)."""
    path = Path(source).expanduser()
    name = FILES[kind]
    if path.is_file():
        return path
    if path.is_dir():
        found = sorted(path.rglob(name))
        if found:
            return found[0]
        raise UsageError(
            f"{path}: no {name} found under this folder; pass the file or the UserRL data folder"
        )
    raise UsageError(f"{path}: not found; pass {name} or the folder that contains it")


def _load_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise UsageError(f"{path}: not valid JSON (line {e.lineno}: {e.msg})") from None
    except OSError as e:
        raise UsageError(f"{path}: cannot read ({e.strerror})") from None


def _rows(path: Path, data: Any) -> list[dict]:
    if not isinstance(data, list):
        raise UsageError(f"{path}: expected a JSON list of records, got {type(data).__name__}")
    return data


def _need(path: Path, i: Any, row: Any, fields: dict[str, type | tuple]) -> None:
    if not isinstance(row, dict):
        raise UsageError(f"{path}: record {i} is {type(row).__name__}, expected an object")
    for name, kind in fields.items():
        if name not in row:
            raise UsageError(f"{path}: record {i} lacks field {name!r}")
        if not isinstance(row[name], kind) or isinstance(row[name], bool):
            raise UsageError(
                f"{path}: record {i} field {name!r} has type {type(row[name]).__name__}"
            )


def _records(path: Path, fields: dict[str, type | tuple]):
    """(index, record) for each record of the JSON list at `path`, each checked to have `fields`."""
    for i, row in enumerate(_rows(path, _load_json(path))):
        _need(path, i, row, fields)
        yield i, row


def read_function_rules(source: str | Path) -> list[dict]:
    """[{id, rule, test_case: [a,b,c,d], expected: float}] (538 in the public file)."""
    path = locate(source, "function")
    out = []
    for i, row in _records(
        path, {"id": str, "rule": str, "test_case": list, "expected_result": (int, float)}
    ):
        case = row["test_case"]
        if len(case) != 4 or not all(
            isinstance(x, (int, float)) and not isinstance(x, bool) for x in case
        ):
            raise UsageError(f"{path}: record {i} test_case must be four numbers, got {case!r}")
        out.append(
            {
                "id": row["id"],
                "rule": row["rule"],
                "test_case": list(case),
                "expected": float(row["expected_result"]),
            }
        )
    return out


def read_telepathy_entities(source: str | Path) -> list[dict]:
    """[{id, title, description, category, target}] (401 in the public file)."""
    path = locate(source, "telepathy")
    fields = {"id": str, "title": str, "description": str, "target_entity": str, "category": str}
    return [
        {k: row[k] for k in ("id", "title", "description", "category")}
        | {"target": row["target_entity"]}
        for _, row in _records(path, fields)
    ]


def read_turtle_stories(source: str | Path) -> list[dict]:
    """[{id, title, surface, bottom, criteria: [{statement, weight}]}] (471 in the public file)."""
    path = locate(source, "turtle")
    data = _load_json(path)
    if not isinstance(data, dict):
        raise UsageError(
            f"{path}: expected a JSON object of stories keyed by id, got {type(data).__name__}"
        )
    out = []
    for key, row in data.items():
        _need(
            path,
            key,
            row,
            {"new_title": str, "new_surface": str, "new_bottom": str, "evaluation": list},
        )
        criteria = []
        for j, c in enumerate(row["evaluation"]):
            if (
                not isinstance(c, dict)
                or not isinstance(c.get("statement"), str)
                or not isinstance(c.get("score"), (int, float))
            ):
                raise UsageError(
                    f"{path}: story {key} evaluation item {j} needs a 'statement' and a numeric 'score'"
                )
            criteria.append({"statement": c["statement"], "weight": float(c["score"])})
        if not criteria:
            raise UsageError(f"{path}: story {key} has no evaluation criteria")
        out.append(
            {
                "id": str(key),
                "title": row["new_title"],
                "surface": row["new_surface"],
                "bottom": row["new_bottom"],
                "criteria": criteria,
            }
        )
    return out


def read_intentions(source: str | Path, split: str) -> list[dict]:
    """[{id, category, task, missing_details: [{description, importance: 1..3, inquiry, options}]}]."""
    path = locate(source, f"intention_{split}")
    out = []
    for i, row in _records(
        path, {"id": str, "category": str, "task": str, "missing_details": list}
    ):
        details = []
        for j, d in enumerate(row["missing_details"]):
            _need(
                path,
                f"{i} missing_details[{j}]",
                d,
                {"description": str, "importance": (str, int), "inquiry": str},
            )
            try:
                importance = int(d["importance"])
            except ValueError:
                raise UsageError(
                    f"{path}: record {i} detail {j} importance {d['importance']!r} is not 1, 2 or 3"
                ) from None
            if importance not in (1, 2, 3):
                raise UsageError(
                    f"{path}: record {i} detail {j} importance {importance} is not 1, 2 or 3"
                )
            options = [str(o) for o in d.get("options") or []]
            details.append(
                {
                    "description": d["description"],
                    "importance": importance,
                    "inquiry": d["inquiry"],
                    "options": options,
                }
            )
        out.append(
            {
                "id": row["id"],
                "category": row["category"],
                "task": row["task"],
                "missing_details": details,
            }
        )
    return out


def read_search_questions(source: str | Path) -> list[dict]:
    """[{id, question, answer}] (125 Bamboogle questions in the public file)."""
    path = locate(source, "search")
    fields = {"id": str, "question": str, "answer": str}
    return [
        {"id": row["id"], "question": row["question"], "answer": row["answer"]}
        for _, row in _records(path, fields)
    ]
