"""Evaluation: metrics, resume after an interruption, checkpoints and API agents as `--model`."""

from __future__ import annotations

import json
import random

import pytest

from mua.eval.summary import summarize

SMALL = ["rollout.max_new_tokens_per_turn=6", "rollout.max_turns=3", "rollout.max_total_tokens=256"]


def _row(task, k, reward, termination="done", parse_errors=0):
    return {
        "gym": "g",
        "task_id": task,
        "sample_index": k,
        "reward": reward,
        "success": reward >= 1.0,
        "excluded": termination == "user_failure",
        "termination": termination,
        "num_turns": 2,
        "tokens": 10,
        "assistant_tokens": 4,
        "parse_errors": parse_errors,
        "tool_errors": {"no_action": 1},
    }


def test_summary_counts_pass_k_and_excludes_user_failures_from_scores():
    rows = [
        _row("a", 0, 1.0),
        _row("a", 1, 0.0),
        _row("b", 0, 1.0),
        _row("b", 1, 1.0),
        _row("c", 0, 0.0, parse_errors=2),
        _row("c", 1, 0.0, termination="user_failure"),
    ]
    s = summarize(rows, [1, 2], ["a", "b", "c"], trivial_baseline=0.25)
    assert s["num_tasks"] == 3 and s["num_trajectories"] == 6 and s["excluded"] == 1
    assert s["reward_mean"] == pytest.approx(3 / 5)  # the user failure is not a 0
    assert s["success_rate"] == pytest.approx(3 / 5)
    # task c has one scored trial, so only k=1 is defined for every task
    assert "pass@2" not in s and s["pass@1"] == pytest.approx((0.5 + 1 + 0) / 3)
    assert s["parse_failures"] == 2 and s["parse_failure_rate"] == pytest.approx(1 / 6)
    assert s["tool_errors"] == 6
    assert s["terminations"] == {"done": 5, "user_failure": 1} and s["trivial_baseline"] == 0.25
    full = summarize([r for r in rows if r["task_id"] != "c"], [1, 2])
    assert full["pass@2"] == pytest.approx(1.0) and full["pass^2"] == pytest.approx(0.5)
    shuffled = rows[:]
    random.Random(3).shuffle(shuffled)
    assert summarize(shuffled, [1, 2], ["a", "b", "c"], 0.25) == s


def test_summary_reports_each_component_mean_over_scored_rows_and_the_table_shows_them():
    from rich.console import Console

    from mua.eval.report import summary_table
    from mua.eval.summary import flat_metrics

    rows = [
        {**_row("a", 0, 1.0), "reward_components": {"db": 1.0, "communicate": 1.0}},
        {**_row("a", 1, 0.0), "reward_components": {"db": 0.0, "communicate": 1.0}},
        {**_row("b", 0, 0.0), "reward_components": {"db": 1.0}},
        {**_row("b", 1, 0.0, termination="user_failure"), "reward_components": {"db": 0.0}},
    ]
    s = summarize(rows, [1])
    assert s["components"] == {"communicate": 1.0, "db": pytest.approx(2 / 3)}
    assert flat_metrics({"g": s})["g/component/db"] == pytest.approx(2 / 3)
    console = Console(width=300, record=True)
    console.print(summary_table({"g": s}, "t"))
    assert "communicate 1.00, db 0.67" in console.export_text()


def _recipe(*overrides):
    from mua.config import load_recipe

    return load_recipe(None, [*SMALL, "rollout.max_concurrency=1", *overrides], verb="eval")


class _Interrupt(Exception):
    pass


def test_interrupted_evaluation_resumes_without_repeats_or_losses(tmp_path):
    from mua.eval.session import run_evaluation

    # sampled (T=1), so the per-trajectory seeds matter too
    recipe = _recipe("eval.n=2", "eval.max_tasks=4", "eval.temperature=1.0")
    ref, _ = run_evaluation(
        recipe, model="tiny:qwen3-1m", gyms=["guess"], out_dir=tmp_path / "ref", track=False
    )

    seen: list = []

    def stop_after_three(row):
        seen.append((row["task_id"], row["sample_index"]))
        if len(seen) == 3:
            raise _Interrupt()

    out = tmp_path / "resumed"
    with pytest.raises(_Interrupt):
        run_evaluation(
            recipe,
            model="tiny:qwen3-1m",
            gyms=["guess"],
            out_dir=out,
            track=False,
            on_row=stop_after_three,
        )
    with open(out / "results.jsonl", "a") as f:
        f.write('{"gym": "guess", "task_id": "guess-te')  # a write torn by a kill
    again: list = []
    summaries, meta = run_evaluation(
        recipe,
        model="tiny:qwen3-1m",
        gyms=["guess"],
        out_dir=out,
        track=False,
        on_row=lambda row: again.append((row["task_id"], row["sample_index"])),
    )
    assert meta["resumed_rows"] == 3
    assert len(again) == 5 and not set(again) & set(seen)
    lines = (out / "results.jsonl").read_text().splitlines()
    keys = [(json.loads(x)["task_id"], json.loads(x)["sample_index"]) for x in lines]
    assert len(keys) == 8 == len(set(keys))
    assert summaries == ref
    ref_rows = {
        (r["task_id"], r["sample_index"]): r
        for r in map(json.loads, (tmp_path / "ref" / "results.jsonl").open())
    }
    assert all(ref_rows[k] == json.loads(x) for k, x in zip(keys, lines, strict=True))
    saved = json.loads((out / "summary.json").read_text())["gyms"]["guess"]
    assert saved["num_trajectories"] == 8 and saved["reward_mean"] == ref["guess"]["reward_mean"]


def test_other_settings_in_the_same_folder_are_refused(tmp_path):
    from mua.errors import UsageError
    from mua.eval.session import run_evaluation

    first = _recipe("eval.max_tasks=1", "rollout.max_turns=6")
    run_evaluation(first, model="expert", gyms=["guess"], out_dir=tmp_path, track=False)
    other = _recipe("eval.max_tasks=1", "rollout.max_turns=6", "eval.n=2")
    with pytest.raises(UsageError, match="different evaluation.*n"):
        run_evaluation(other, model="expert", gyms=["guess"], out_dir=tmp_path, track=False)
    summaries, _ = run_evaluation(
        other, model="expert", gyms=["guess"], out_dir=tmp_path, fresh=True, track=False
    )
    assert summaries["guess"]["num_trajectories"] == 2 and summaries["guess"]["success_rate"] == 1.0


def test_checkpoint_dir_as_model_is_merged_and_scores_like_the_model(tmp_path):
    import torch.distributed.checkpoint as dcp

    from mua.eval.session import run_evaluation
    from mua.models import load_model, load_tokenizer

    model = load_model("tiny:qwen3-1m")
    step = tmp_path / "run" / "checkpoints" / "global_step_3"
    step.mkdir(parents=True)
    dcp.save(
        {"model": {k: v.clone() for k, v in model.state_dict().items()}},
        checkpoint_id=str(step),
        no_dist=True,
    )
    model.config.save_pretrained(step)
    model.generation_config.save_pretrained(step)
    load_tokenizer("tiny:qwen3-1m").save_pretrained(step)
    recipe = _recipe("eval.max_tasks=3")
    direct, _ = run_evaluation(
        recipe, model="tiny:qwen3-1m", gyms=["guess"], out_dir=tmp_path / "a", track=False
    )
    merged, meta = run_evaluation(
        recipe, model=str(tmp_path / "run"), gyms=["guess"], out_dir=tmp_path / "b", track=False
    )
    assert (tmp_path / "run" / "hf" / "global_step_3" / "merge_info.json").is_file()
    assert meta["model_dir"].endswith("global_step_3")
    rows = lambda d: [json.loads(x)["messages"] for x in (tmp_path / d / "results.jsonl").open()]  # noqa: E731
    assert sorted(map(json.dumps, rows("a"))) == sorted(map(json.dumps, rows("b")))
    assert direct == merged


def test_openai_agent_is_evaluated_through_the_endpoint(tmp_path):
    from mua.eval.session import run_evaluation
    from tests.fakes.fake_openai import FakeOpenAIServer

    def reply(request):  # always guesses 8: right only on tasks whose target is 8
        return "[answer] 8"

    with FakeOpenAIServer(reply) as server:
        recipe = _recipe(
            "eval.max_tasks=6", f"rollout.openai.base_url={server.base_url}", "rollout.max_turns=1"
        )
        summaries, meta = run_evaluation(
            recipe, model="openai:fake-model", gyms=["guess"], out_dir=tmp_path, track=False
        )
        assert server.total_requests == 6
    rows = [json.loads(x) for x in (tmp_path / "results.jsonl").open()]
    assert all(r["messages"][2]["content"] == "[answer] 8" for r in rows)
    assert summaries["guess"]["reward_mean"] == pytest.approx(sum(r["reward"] for r in rows) / 6)
    assert meta["model"] == "openai:fake-model"


def test_eval_all_gyms_prints_a_row_per_gym_and_logs_mlflow(tmp_path, mua_cli):
    from mua.gym.registry import get_gym
    from mua.gym.registry import list_gyms as registered

    def list_gyms():  # gyms with a built-in dataset (tau2 needs public data)
        return [g for g in registered() if not get_gym(g).needs_data]

    code, out, err = mua_cli(
        "eval",
        "--gym",
        "all",
        "--model",
        "tiny:qwen3-1m",
        "--max-tasks",
        "1",
        "--out",
        str(tmp_path),
        *SMALL,
    )
    assert code == 0, err[-2000:]
    for gym in list_gyms():
        assert f"│ {gym} " in out, gym
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert set(summary["gyms"]) == set(list_gyms())
    assert sum(1 for _ in (tmp_path / "results.jsonl").open()) == len(list_gyms())
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    run = client.get_run((tmp_path / "mlflow_run_id").read_text().strip())
    assert (
        "guess/reward_mean" in run.data.metrics and run.data.params["model.path"] == "tiny:qwen3-1m"
    )


def test_bad_gym_and_model_are_one_line_errors(mua_cli):
    code, _, err = mua_cli("eval", "--gym", "gues", "--model", "tiny:qwen3-1m", "--no-mlflow")
    assert code == 2 and "did you mean 'guess'" in err and "Traceback" not in err
    code, _, err = mua_cli(
        "eval", "--gym", "guess", "--model", "/nonexistent/folder", "--no-mlflow"
    )
    assert code == 2 and "does not exist" in err
