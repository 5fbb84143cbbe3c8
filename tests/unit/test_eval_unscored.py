"""An evaluation whose LLM user (or judge) dies after the preflight: nothing scored is one line
and a non-zero exit, partial results say what was left out, a resume retries the masked
trajectories instead of keeping them as done, and a judge's failure is named as the judge's."""

from __future__ import annotations

import json
import math

import pytest

from tests.fakes.fake_openai import FakeOpenAIServer, Fault

pytestmark = pytest.mark.timeout(300)
SMALL = [
    "rollout.max_new_tokens_per_turn=16",
    "rollout.max_turns=3",
    "rollout.max_total_tokens=2048",
    "user.max_retries=0",
    "user.backoff_s=0.01",
]


class Switch:
    """Faults for a fake server: the preflight is answered, later requests fail while `dead`."""

    def __init__(self):
        self.dead = True

    def __call__(self, index, _body):
        return Fault("http500") if self.dead and index > 0 else None


def _eval_args(server, out, gyms="tau"):
    return [
        "eval",
        "--gym",
        gyms,
        "--model",
        "expert",
        "--user",
        "llm",
        "--max-tasks",
        "2",
        "--out",
        str(out),
        "--no-mlflow",
        f"user.base_url={server.base_url}",
        *SMALL,
    ]


@pytest.mark.parametrize("gyms", ["tau", "tau,travel"])
def test_nothing_scored_is_one_line_and_a_non_zero_exit(tmp_path, mua_cli, gyms):
    with FakeOpenAIServer(faults=Switch()) as server:
        code, stdout, err = mua_cli(*_eval_args(server, tmp_path / "eval", gyms))
    assert code == 1, (code, stdout[-2000:], err[-3000:])
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    assert "nothing could be scored" in lines[0] and "user_failure" in lines[0]
    assert "re-run the same command" in lines[0]


def test_partial_results_say_what_was_left_out():
    from mua.cli.eval_cmd import result_notes

    def summary(reward, scored, excluded):
        return {
            "num_tasks": 2,
            "num_trajectories": scored + excluded,
            "reward_mean": reward,
            "success_rate": reward,
            "turns_mean": 2.0,
            "excluded": excluded,
            "terminations": {"done": scored, "user_failure": excluded}
            if scored
            else {"user_failure": excluded},
        }

    notes = result_notes({"a": summary(0.5, 1, 1), "b": summary(math.nan, 0, 2)})
    text = "\n".join(notes)
    assert "a: 1 of 2 trajectories not scored (user_failure 1)" in text
    assert "b: nothing scored (user_failure 2)" in text
    assert "no macro average" in text and "re-run the same command" in text
    assert result_notes({"a": summary(0.5, 2, 0), "b": summary(0.25, 2, 0)})[0].startswith(
        "macro average over 2 gyms"
    )


def test_resume_retries_masked_trajectories(tmp_path, mua_cli):
    switch = Switch()
    out = tmp_path / "eval"
    with FakeOpenAIServer(faults=switch) as server:
        first = mua_cli(*_eval_args(server, out))
        assert first[0] == 1, first[2][-2000:]
        rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
        assert rows and all(r["termination"] == "user_failure" for r in rows)
        switch.dead = False
        code, stdout, err = mua_cli(*_eval_args(server, out))
    assert code == 0, err[-3000:]
    assert "already done" not in stdout and "2 not scored before were retried" in stdout
    saved = json.loads((out / "summary.json").read_text())
    assert saved["gyms"]["tau"]["excluded"] == 0 and saved["retried_rows"] == 2
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert len(rows) == 2 and not any(r["excluded"] for r in rows)


def test_a_judge_failure_names_the_judge(monkeypatch):
    from mua.config import load_recipe
    from mua.errors import RunFailure
    from mua.run.preflight import ask_endpoints
    from mua.run.spec import run_spec

    with FakeOpenAIServer(faults=lambda _i, _b: Fault("http500")) as server:
        recipe = load_recipe(
            None,
            [
                "gym.name=tau2",
                "user.kind=scripted",
                f"gym.options.judge={{base_url: '{server.base_url}', model: j, max_retries: 0}}",
            ],
            verb="eval",
        )
        with pytest.raises(RunFailure) as err:
            ask_endpoints(run_spec(recipe, e) for e in recipe.gyms)
    text = str(err.value)
    assert "judge" in text and "LLM user" not in text, text
    assert "gym.options.judge" in text


def _cell(scored: int, excluded: int) -> dict:
    """A summary with its blame, as `mua eval` makes it: `scored` failed rows, `excluded` masked."""
    from mua.eval.blame import Verdict, blame_summary
    from mua.eval.summary import row_key, summarize

    rows = [
        {"gym": "g", "task_id": f"t{i}", "sample_index": 0, "reward": 0.0, "success": False,
         "excluded": i >= scored, "termination": "user_failure" if i >= scored else "done",
         "num_turns": 2, "tokens": 10, "assistant_tokens": 5, "parse_errors": 0}
        for i in range(scored + excluded)
    ]  # fmt: skip
    verdicts = {row_key(r): Verdict("agent", "no_rule", "") for r in rows if not r["excluded"]}
    return {**summarize(rows, [1]), "blame": blame_summary(rows, verdicts)}


def _text(renderable) -> str:
    import io

    from rich.console import Console

    console = Console(width=160, record=True, file=io.StringIO())
    console.print(renderable)
    return console.export_text()


def _rows(text: str) -> list[list[str]]:
    """The cells of every row of the tables in `text`."""
    lines = [line for line in text.splitlines() if line.startswith("│")]
    return [[cell.strip() for cell in line.strip("│").split("│")] for line in lines]


def test_the_blame_table_says_nothing_was_scored_not_failed_0():
    from mua.eval.report import blame_table

    rows = _rows(_text(blame_table({"a": _cell(2, 0), "b": _cell(0, 2)})))
    assert rows == [["a", "1.00", "1.00", "0.00", "0.00", "0.00"], ["b", "unscored", "–", "–", "–", "–"]]  # fmt: skip


def test_the_table_and_the_note_agree_on_the_macro_average():
    from mua.cli.eval_cmd import result_notes
    from mua.eval.report import summary_table, user_matrix_table
    from mua.users.matrix import matrix_summary

    plain = {"a": _cell(2, 0), "b": _cell(0, 2)}
    assert "no macro average: nothing scored on b" in result_notes(plain)
    assert "macro avg" not in _text(summary_table(plain, "t"))
    # a held-out user's cell with nothing scored leaves the training user's macro average whole
    matrix = {"a@train": _cell(2, 0), "b@train": _cell(2, 0), "a@u": _cell(0, 2)}
    notes = result_notes(matrix)
    assert notes[0].startswith("macro average over 2 gyms") and "a@u: nothing scored (user_failure 2)" in notes  # fmt: skip
    assert not any(n.startswith("no macro average") for n in notes)
    assert "macro avg" in _text(summary_table(matrix, "t"))
    rows = _rows(_text(user_matrix_table(matrix, matrix_summary(matrix))))
    assert ["a", "u", "unscored", "–", "–", "–", "–"] in rows
