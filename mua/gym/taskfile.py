"""Read and write canonical task parquet files (schema in docs/gyms.md, "The canonical task row").

Columns: task_id, gym, split, prompt (JSON string of chat messages), payload (JSON string),
source, version. Writing is atomic (temp file, then rename). Reading checks the columns and
says exactly what is wrong with a bad file.
"""

from __future__ import annotations

import os
from pathlib import Path

from mua.errors import UsageError
from mua.gym.api import Task

COLUMNS = ("task_id", "gym", "split", "prompt", "payload", "source", "version")


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
    tasks = []
    for i, row in enumerate(table.to_pylist()):
        try:
            tasks.append(Task.from_row(row))
        except (ValueError, TypeError, KeyError) as e:
            raise UsageError(f"{path}: row {i}: {e}") from None
    return tasks
