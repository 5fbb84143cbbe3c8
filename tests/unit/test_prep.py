"""`mua prep`: canonical parquet output, determinism, errors and exit codes."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

from mua.errors import UsageError
from mua.gym.api import Task
from mua.gym.prep import check_options, parse_option_args
from mua.gym.taskfile import COLUMNS, read_tasks, write_tasks


def _fake_folder(path, gym, counts):
    for split, n in counts.items():
        tasks = [
            Task(f"{gym}-{split}-{i}", gym, split, [{"role": "user", "content": str(i)}], {"i": i})
            for i in range(n)
        ]
        write_tasks(tasks, path / f"{split}.parquet")
    return path


def test_cli_writes_canonical_deterministic_parquet(mua_cli, tmp_path):
    outs = []
    for name, seed in (("a", "4"), ("b", "4"), ("c", "5")):
        code, stdout, stderr = mua_cli(
            "prep",
            "--gym",
            "math",
            "--out",
            str(tmp_path / name),
            "--seed",
            seed,
            "--option",
            "num_train=30",
            "--option",
            "num_test=7",
        )
        assert code == 0, stderr
        outs.append(tmp_path / name)
    assert "train" in stdout and "30" in stdout and "7" in stdout
    table = pq.read_table(outs[0] / "train.parquet")
    assert tuple(table.column_names) == COLUMNS and table.num_rows == 30
    row = table.slice(0, 1).to_pylist()[0]
    assert row["gym"] == "math" and row["split"] == "train"
    assert json.loads(row["prompt"])[-1]["role"] == "user" and "answer" in json.loads(
        row["payload"]
    )
    for split in ("train", "test"):
        assert (outs[0] / f"{split}.parquet").read_bytes() == (
            outs[1] / f"{split}.parquet"
        ).read_bytes()
    assert (
        read_tasks(outs[0] / "test.parquet")[0].payload
        != read_tasks(outs[2] / "test.parquet")[0].payload
    )


def test_cli_recipe_form_and_list(mua_cli, tmp_path):
    recipe = tmp_path / "prep_travel.yaml"
    recipe.write_text(
        f"verb: prep\ngym:\n  name: travel\n  options:\n    num_train: 5\n    num_test: 2\n"
        f"out: {tmp_path}/t\n"
    )
    code, stdout, stderr = mua_cli("prep", str(recipe), "seed=3", "gym.options.num_test=3")
    assert code == 0, stderr
    tasks = read_tasks(tmp_path / "t" / "test.parquet")
    assert len(tasks) == 3 and tasks[0].source == "builtin:seed=3"
    code, stdout, _ = mua_cli("prep", "--list")
    assert code == 0 and "travel" in stdout and "math" in stdout


@pytest.mark.parametrize(
    "args, message",
    [
        (["--gym", "travl"], "did you mean 'travel'"),
        (
            ["--gym", "math", "--source", "/no/such/file.jsonl"],
            "--source /no/such/file.jsonl: no such file",
        ),
        (["--gym", "math", "--option", "num_trian=3"], "did you mean 'num_train'"),
        (["--gym", "math", "--option", "num_train=many"], "must be an integer"),
        (["--gym", "travel", "--source", "."], "travel has no public dataset"),
        (["mix", "data/x:1"], "list the gyms in a recipe's `gyms:`"),
        ([], "give --gym NAME"),
    ],
)
def test_cli_errors_are_one_line_exit_2(mua_cli, args, message):
    code, stdout, stderr = mua_cli("prep", *args)
    assert code == 2
    assert message in stderr and len(stderr.strip().splitlines()) == 1 and "Traceback" not in stderr


def test_cli_bad_source_file_reports_the_loaders_line(mua_cli, tmp_path):
    bad = tmp_path / "limo.jsonl"
    bad.write_text('{"question": "1+1", "answer": "2"}\n{"question": "2+2"}\n')
    code, _, stderr = mua_cli(
        "prep", "--gym", "math", "--source", str(bad), "--out", str(tmp_path / "o")
    )
    assert code == 2 and "limo.jsonl:2: 'answer' must be" in stderr


def test_option_parsing_and_checking():
    assert parse_option_args(["n=3", "f=0.5", "flag=true", "s=abc"]) == {
        "n": 3,
        "f": 0.5,
        "flag": True,
        "s": "abc",
    }
    with pytest.raises(UsageError, match="expected key=value"):
        parse_option_args(["oops"])
    assert check_options({"n": 2}, {"n": 1, "f": 0.1}, "g") == {"n": 2, "f": 0.1}
    assert check_options({"f": 1}, {"f": 0.1}, "g") == {"f": 1.0}
    with pytest.raises(UsageError, match="must be >= 0"):
        check_options({"n": -1}, {"n": 1}, "g")
