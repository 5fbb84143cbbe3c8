"""Read and write canonical task parquet files (schema in docs/gyms.md, "The canonical task row").

Writing is atomic (temp file, then rename). Reading checks the columns and every row and names the
file, row and problem in one line (not UTF-8, a bad prompt or payload, an empty or repeated
task_id, a wrong column type, a null); `TaskRowCheck` is that check one task at a time, also for
tasks built in memory. An empty file reads as no tasks (whether that is an error is the reader's).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from mua.errors import UsageError
from mua.gym.api import Task

COLUMNS = ("task_id", "gym", "split", "prompt", "payload", "source", "version")
REQUIRED = ("task_id", "gym", "prompt", "payload")
# What each column may be stored as: the canonical text, or what a hand-made file may hold
# that still reads as the same task.
COLUMN_TYPES = {
    "task_id": ("text or integer", ("text", "integer")),
    "gym": ("text", ("text",)),
    "split": ("text", ("text",)),
    "prompt": ("text (a JSON list of chat messages) or a list of messages", ("text", "list")),
    "payload": ("text (a JSON object) or a struct", ("text", "struct")),
    "source": ("text", ("text",)),
    "version": ("text or integer", ("text", "integer")),
}
# What the JSON text of a column must decode to
JSON_KINDS = {"prompt": (list, "a JSON list of chat messages"), "payload": (dict, "a JSON object")}


def write_tasks(tasks: list[Task], path: str | Path) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    ids = [t.task_id for t in tasks]
    if len(set(ids)) != len(ids):
        dup = next(i for i in ids if ids.count(i) > 1)
        raise ValueError(f"duplicate task_id {dup!r} in tasks written to {path}")
    rows = [t.to_row() for t in tasks]
    table = pa.table(
        {c: [r[c] for r in rows] for c in COLUMNS},
        schema=pa.schema([(c, pa.string()) for c in COLUMNS]),
    )
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    pq.write_table(table, tmp)
    os.replace(tmp, path)
    return path


def task_problem(task: Task) -> str | None:
    """What is wrong with a task row, or None when it is usable."""
    if not task.task_id.strip():
        return "empty task_id"
    if not isinstance(task.gym, str) or not task.gym.strip():
        return "empty gym"
    if not isinstance(task.prompt, list) or not task.prompt:
        return "prompt must be a non-empty list of chat messages, got " + repr(task.prompt)[:60]
    for j, message in enumerate(task.prompt):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            return f"prompt message {j} is not a chat message with a role: {message!r:.60}"
    if not isinstance(task.payload, dict):
        return f"payload must be a JSON object, got {type(task.payload).__name__}"
    return None


class TaskRowCheck:
    """Checks tasks one at a time, in order: each usable (`task_problem`), no task_id twice.

    `where` names the file or source and `unit` a position in it ("row", "train task") in the one
    `UsageError` line a bad task gets; `hint` ends the message about a repeated id.
    """

    def __init__(self, where: str, unit: str, hint: str = "") -> None:
        self.where, self.unit, self.hint = where, unit, hint
        self._first: dict[str, int] = {}

    def check(self, index: int, task: Task) -> None:
        here = f"{self.where}: {self.unit} {index}"
        problem = task_problem(task)
        if problem:
            raise UsageError(f"{here} (task_id {task.task_id!r}): {problem}")
        first = self._first.setdefault(task.task_id, index)
        if first != index:
            raise UsageError(
                f"{here}: task_id {task.task_id!r} repeats {self.unit} {first}; "
                f"task ids must be unique{self.hint}"
            )


def utf8_rows(table, path: Path) -> list[dict]:
    """Rows with text columns decoded strictly as UTF-8 (invalid bytes are named by row)."""
    import pyarrow as pa

    text_columns = [
        f.name
        for f in table.schema
        if pa.types.is_string(f.type)
        or pa.types.is_large_string(f.type)
        or pa.types.is_binary(f.type)
        or pa.types.is_large_binary(f.type)
    ]
    raw = {c: table.column(c).cast(pa.large_binary()).to_pylist() for c in text_columns}
    others = table.drop_columns(text_columns).to_pylist()
    rows = []
    for i in range(table.num_rows):
        row = dict(others[i]) if others else {}
        for column in text_columns:
            value = raw[column][i]
            try:
                row[column] = None if value is None else value.decode("utf-8")
            except UnicodeDecodeError as e:
                raise UsageError(
                    f"{path}: row {i}: column {column!r} is not valid UTF-8 (byte {e.start}: "
                    f"{value[e.start : e.start + 4]!r}); re-encode the file's text as UTF-8"
                ) from None
        rows.append(row)
    return rows


def _kind(arrow_type) -> str:
    import pyarrow as pa

    t = pa.types
    if t.is_string(arrow_type) or t.is_large_string(arrow_type):
        return "text"
    if t.is_binary(arrow_type) or t.is_large_binary(arrow_type):
        return "text"  # decoded as UTF-8 row by row
    if t.is_integer(arrow_type):
        return "integer"
    if t.is_list(arrow_type) or t.is_large_list(arrow_type):
        return "list"
    if t.is_struct(arrow_type) or t.is_map(arrow_type):
        return "struct"
    return str(arrow_type)


def check_column_types(table, path: Path) -> None:
    """Every known column holds a type a task can be read from, or one UsageError naming it."""
    for field in table.schema:
        kind = _kind(field.type)
        if field.name not in COLUMN_TYPES or kind == "null":  # all null: named row by row
            continue
        expected, kinds = COLUMN_TYPES[field.name]
        if kind not in kinds:
            raise UsageError(
                f"{path}: column {field.name!r} holds {field.type}, expected {expected}; "
                "write the file with `mua prep` (or fix that column)"
            )


def _decoded(row: dict, i: int, path: Path) -> dict:
    """The row with `prompt` and `payload` decoded from JSON text and of the kind they need."""
    for column in REQUIRED:
        if row.get(column) is None:
            raise UsageError(
                f"{path}: row {i}: column {column!r} is null, expected "
                f"{COLUMN_TYPES[column][0]}; every task needs one"
            )
    for column, (kind, expected) in JSON_KINDS.items():
        value = row[column]
        if isinstance(value, str):
            try:
                value = row[column] = json.loads(value)
            except ValueError as e:
                raise UsageError(
                    f"{path}: row {i}: column {column!r} is not valid JSON ({e})"
                ) from None
        if not isinstance(value, kind):
            raise UsageError(
                f"{path}: row {i}: column {column!r} must be {expected}, got "
                f"{type(value).__name__} {value!r:.60}"
            )
    return row


def read_tasks(path: str | Path) -> list[Task]:
    import pyarrow.parquet as pq

    path = Path(path)
    if not path.exists():
        raise UsageError(
            f"{path}: task file not found; create it with `mua prep --gym NAME --out DIR`"
        )
    try:
        table = pq.read_table(path)
    except Exception as e:
        raise UsageError(
            f"{path}: not a readable parquet file ({e}); regenerate it with `mua prep`"
        ) from None
    missing = [c for c in ("task_id", "gym", "prompt", "payload") if c not in table.column_names]
    if missing:
        raise UsageError(
            f"{path}: missing column(s) {missing}; a task file needs {list(COLUMNS)} (written by `mua prep`)"
        )
    check_column_types(table, path)
    tasks = []
    rows = TaskRowCheck(str(path), "row", " (regenerate the file with `mua prep`)")
    for i, row in enumerate(utf8_rows(table, path)):
        row = _decoded(row, i, path)
        try:
            task = Task.from_row(row)
        except (ValueError, TypeError, KeyError, AttributeError) as e:
            raise UsageError(f"{path}: row {i}: {e}") from None
        rows.check(i, task)
        tasks.append(task)
    return tasks
