"""Bad data fails at prep or launch with one line naming the file and row (exit 2)."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mua.errors import UsageError
from mua.gym.api import Task
from mua.gym.taskfile import COLUMNS, read_tasks, write_tasks

PROMPT = json.dumps([{"role": "user", "content": "Your guess?"}])


def _row(task_id: str, **changes) -> dict:
    row = {
        "task_id": task_id,
        "gym": "guess",
        "split": "train",
        "prompt": PROMPT,
        "payload": json.dumps({"target": 3, "max_number": 8}),
        "source": "test",
        "version": "1",
    }
    return {**row, **changes}


def _write_rows(path, rows, binary: bool = False):
    kind = pa.binary() if binary else pa.string()
    pq.write_table(pa.table({c: pa.array([r[c] for r in rows], kind) for c in COLUMNS}), str(path))
    return path


def _rl_recipe(tmp_path, train, test=()):
    from mua.config import load_recipe

    return load_recipe(
        None,
        [
            "gym.name=guess",
            f"data.train_files=[{train}]",
            f"data.test_files=[{','.join(map(str, test))}]",
            f"run_dir={tmp_path / 'run'}",
        ],
        verb="train",
    )


def _sft_recipe(tmp_path, data):
    from mua.config import load_recipe

    return load_recipe(
        None,
        ["algo.kind=sft", f"data.train_files=[{data}]", f"run_dir={tmp_path / 'run'}"],
        verb="train",
    )


def _launch_check(recipe):
    from mua.train.launcher import check_inputs

    check_inputs(recipe)


def test_empty_prompt_is_refused_naming_file_and_row(tmp_path):
    path = _write_rows(tmp_path / "t.parquet", [_row("a"), _row("b", prompt="[]")])
    with pytest.raises(
        UsageError, match=r"t\.parquet: row 1 \(task_id 'b'\): prompt must be a non-empty"
    ):
        _launch_check(_rl_recipe(tmp_path, path))


def test_duplicate_task_id_is_refused_not_dropped(tmp_path):
    path = _write_rows(tmp_path / "t.parquet", [_row("a"), _row("b"), _row("a")])
    with pytest.raises(UsageError, match=r"t\.parquet: row 2: task_id 'a' repeats row 0"):
        read_tasks(path)


def test_duplicate_held_out_task_across_files_is_refused_at_launch_and_in_eval(tmp_path):
    from mua.config import load_recipe
    from mua.eval.tasks import load_eval_tasks

    train = _write_rows(tmp_path / "train.parquet", [_row("t0")])
    a = _write_rows(tmp_path / "a.parquet", [_row("x", split="test"), _row("y", split="test")])
    b = _write_rows(tmp_path / "b.parquet", [_row("y", split="test")])
    with pytest.raises(UsageError, match=r"b\.parquet: task_id 'y' is also in .*a\.parquet"):
        _launch_check(_rl_recipe(tmp_path, train, [a, b]))
    recipe = load_recipe(None, [f"data.test_files=[{a},{b}]"], verb="eval")
    with pytest.raises(UsageError, match=r"b\.parquet: row 0: task_id 'y' is also in .*a\.parquet"):
        load_eval_tasks(recipe, ["guess"])


def test_non_utf8_task_text_is_refused_naming_row_and_column(tmp_path):
    rows = [{k: v.encode() for k, v in _row(t).items()} for t in ("a", "b")]
    rows[1]["prompt"] = b'[{"role": "user", "content": "caf\xe9"}]'
    path = _write_rows(tmp_path / "t.parquet", rows, binary=True)
    with pytest.raises(UsageError, match=r"t\.parquet: row 1: column 'prompt' is not valid UTF-8"):
        _launch_check(_rl_recipe(tmp_path, path))


def test_empty_train_file_is_refused_at_launch(tmp_path):
    path = write_tasks([], tmp_path / "empty.parquet")
    with pytest.raises(UsageError, match=r"empty\.parquet: holds no tasks"):
        _launch_check(_rl_recipe(tmp_path, path))


def test_sft_data_non_utf8_empty_and_empty_messages_are_refused_at_launch(tmp_path):
    good = json.dumps({"messages": [{"role": "user", "content": "hi"}]})
    cases = {
        "latin1.jsonl": (good + "\n" + '{"messages": "caf').encode() + b"\xe9\n",
        "empty.jsonl": b"\n\n",
        "nomsg.jsonl": (good + "\n" + json.dumps({"messages": []}) + "\n").encode(),
    }
    expected = {
        "latin1.jsonl": r"latin1\.jsonl: line 2: not valid UTF-8",
        "empty.jsonl": r"empty\.jsonl: holds no conversations",
        "nomsg.jsonl": r"nomsg\.jsonl: row 1: needs `token_ids` \+ `loss_mask` or a non-empty",
    }
    for name, data in cases.items():
        (tmp_path / name).write_bytes(data)
        with pytest.raises(UsageError, match=expected[name]):
            _launch_check(_sft_recipe(tmp_path, tmp_path / name))


@pytest.mark.parametrize(
    "second, message",
    [
        (("b", []), r"src\.jsonl: train task 1 \(task_id 'b'\): prompt must be"),
        (("a", [{"role": "user"}]), r"src\.jsonl: train task 1: task_id 'a' repeats train task 0"),
    ],
)
def test_prep_refuses_bad_rows_from_a_source(tmp_path, monkeypatch, second, message):
    from mua.gym import prep

    class Spec:
        name = "guess"

        @staticmethod
        def build_tasks(source, seed, options):
            ok = Task("a", "guess", "train", [{"role": "user", "content": "x"}], {})
            return {"train": [ok, Task(second[0], "guess", "train", second[1], {})]}

    monkeypatch.setattr("mua.gym.registry.get_gym", lambda name: Spec)
    (tmp_path / "src.jsonl").write_text("{}")
    with pytest.raises(UsageError, match=message):
        prep.build_and_write("guess", tmp_path / "out", source=str(tmp_path / "src.jsonl"))
    assert not (tmp_path / "out").exists()


def test_bad_train_file_is_one_line_exit_2_before_torchrun(tmp_path, mua_cli):
    path = _write_rows(tmp_path / "t.parquet", [_row("a"), _row("a")])
    code, out, err = mua_cli(
        "train", "gym.name=guess", f"data.train_files=[{path}]", f"run_dir={tmp_path / 'run'}",
        "total_steps=1",
    )  # fmt: skip
    assert code == 2, err[-2000:]
    lines = [x for x in err.splitlines() if x.strip()]
    assert len(lines) == 1 and "t.parquet: row 1: task_id 'a' repeats row 0" in lines[0]
    assert "Traceback" not in err and "torch.distributed" not in err
