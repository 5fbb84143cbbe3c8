"""A task file with a column of the wrong type (or a null where a task needs a value) is refused
with one line naming the file, the column and the type it must have, not a Python message such
as "'int' object is not iterable"; the other shapes a hand-made file may use still read."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mua.errors import UsageError
from mua.gym.taskfile import read_tasks

GOOD = {
    "task_id": "t0",
    "gym": "guess",
    "split": "train",
    "prompt": json.dumps([{"role": "user", "content": "Your guess?"}]),
    "payload": json.dumps({"target": 3, "max_number": 8}),
    "source": "test",
    "version": "1",
}


def _write(path, **columns):
    """One row: GOOD, with `columns` given as pyarrow arrays in place of its values."""
    table = pa.table({c: columns.get(c, pa.array([GOOD[c]])) for c in GOOD})
    pq.write_table(table, str(path))
    return path


WRONG = {
    "prompt is a number": (
        {"prompt": pa.array([5])},
        "column 'prompt' holds int64, expected text (a JSON list of chat messages)",
    ),
    "payload is a list": (
        {"payload": pa.array([[1, 2]])},
        "column 'payload' holds list<element: int64>, expected text (a JSON object)",
    ),
    "payload JSON is a list": (
        {"payload": pa.array(["[1, 2]"])},
        "row 0: column 'payload' must be a JSON object, got list [1, 2]",
    ),
    "prompt JSON is a number": (
        {"prompt": pa.array(["7"])},
        "row 0: column 'prompt' must be a JSON list of chat messages, got int 7",
    ),
    "gym is a number": ({"gym": pa.array([3])}, "column 'gym' holds int64, expected text"),
    "task_id is a float": (
        {"task_id": pa.array([1.5])},
        "column 'task_id' holds double, expected text or integer",
    ),
    "split is a number": ({"split": pa.array([2])}, "column 'split' holds int64, expected text"),
    "prompt is null": (
        {"prompt": pa.array([None], pa.string())},
        "row 0: column 'prompt' is null, expected text",
    ),
    "payload is all nulls": ({"payload": pa.array([None])}, "row 0: column 'payload' is null"),
}


@pytest.mark.parametrize("case", sorted(WRONG))
def test_a_wrong_column_type_names_the_column_and_the_type_expected(tmp_path, case):
    columns, expected = WRONG[case]
    path = _write(tmp_path / "tasks.parquet", **columns)
    with pytest.raises(UsageError) as refused:
        read_tasks(path)
    (line,) = str(refused.value).splitlines()
    assert line.startswith(f"{path}: ") and expected in line, line
    assert "object is not iterable" not in line


def test_other_shapes_of_the_same_task_still_read(tmp_path):
    path = _write(
        tmp_path / "tasks.parquet",
        task_id=pa.array([7]),
        prompt=pa.array([[{"role": "user", "content": "Your guess?"}]]),
        payload=pa.array([{"target": 3, "max_number": 8}]),
        version=pa.array([2]),
    )
    (task,) = read_tasks(path)
    assert task.task_id == "7" and task.version == "2"
    assert task.prompt == [{"role": "user", "content": "Your guess?"}]
    assert task.payload == {"target": 3, "max_number": 8}


def test_the_cli_refuses_it_with_exit_2(tmp_path, mua_cli):
    path = _write(tmp_path / "tasks.parquet", prompt=pa.array([5]))
    code, out, err = mua_cli(
        "eval",
        f"data.test_files=[{path}]",
        "gym.name=guess",
        "--model",
        "expert",
        "--out",
        str(tmp_path / "out"),
    )
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1, err[-2000:]
    assert "column 'prompt' holds int64" in lines[0]
