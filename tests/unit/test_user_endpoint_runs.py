"""Whole runs against a simulated user on a real HTTP server (127.0.0.1): a wrong key or model
stops `mua eval` and `mua train` before anything runs (one line, exit 1, nothing written), and a
user that never answers is excluded from the scores and counted in summary.json, the table and
MLflow."""

from __future__ import annotations

import json

import pytest

from tests.conftest import SMALL_ROLLOUT, tau_expert_eval, tau_expert_evaluation
from tests.fakes.fake_openai import FakeOpenAIServer, Fault

pytestmark = pytest.mark.timeout(300)
SECRET = "sk-live-0123456789abcdef"


def refuse(status: int):
    fault = Fault("status", status=status, message=f"Incorrect API key provided: {SECRET}")
    return lambda _index, _body: fault


@pytest.mark.parametrize("status", [401, 404])
def test_eval_with_a_refused_user_is_one_line_exit_1_and_writes_nothing(
    tmp_path, mua_cli, monkeypatch, status
):
    monkeypatch.setenv("MUA_TEST_RUN_KEY", SECRET)
    out = tmp_path / "eval"
    with FakeOpenAIServer(faults=refuse(status)) as server:
        url = server.base_url.replace("http://", "http://bob:pw-secret@")
        code, stdout, err = mua_cli(
            *tau_expert_eval(out),
            f"user.base_url={url}",
            "user.api_key_env=MUA_TEST_RUN_KEY",
            *SMALL_ROLLOUT,
        )
        requests = server.total_requests
    assert code == 1, err[-2000:]
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    assert f"HTTP {status}" in lines[0] and f"127.0.0.1:{server.port}" in lines[0]
    assert SECRET not in err + stdout and "pw-secret" not in err + stdout
    assert requests == 1  # the preflight only: no trajectory ran
    assert not (out / "results.jsonl").exists()


def test_train_with_a_refused_user_stops_before_any_rank_starts(tmp_path, monkeypatch):
    from mua.config import load_recipe
    from mua.errors import RunFailure
    from mua.gym import get_gym
    from mua.gym.taskfile import write_tasks
    from mua.train.launcher import launch

    monkeypatch.setenv("MUA_TEST_RUN_KEY", SECRET)
    tasks = get_gym("guess").build_tasks(None, 0, {})["train"][:4]
    data = write_tasks(tasks, tmp_path / "train.parquet")
    run_dir = tmp_path / "run"
    with FakeOpenAIServer(faults=refuse(403)) as server:
        recipe = load_recipe(
            None,
            [
                "gym.name=guess",
                f"data.train_files=[{data}]",
                f"run_dir={run_dir}",
                "user.kind=llm",
                f"user.base_url={server.base_url}",
                "user.api_key_env=MUA_TEST_RUN_KEY",
            ],
            verb="train",
        )
        with pytest.raises(RunFailure, match="HTTP 403") as err:
            launch(recipe)
    assert "\n" not in str(err.value) and SECRET not in str(err.value)
    assert not (run_dir / "recipe.resolved.yaml").exists()  # torchrun was never started


def test_a_user_that_never_answers_is_excluded_and_counted(tmp_path):
    from mua.eval.report import summary_table

    # the preflight is answered; every later request hangs until the server stops
    def hang_after_first(index, _body):
        return None if index == 0 else "hang"

    with FakeOpenAIServer(faults=hang_after_first, hang_cap_s=None) as server:
        overrides = [
            "user.timeout_s=3",
            "user.max_retries=1",
            "user.backoff_s=0.01",
            "rollout.call_timeout_s=2",  # below what the user may take (6 s): not a timeout
        ]
        summaries = tau_expert_evaluation(server.base_url, tmp_path, overrides, track=True)
    tau = summaries["tau"]
    assert tau["terminations"] == {"user_failure": 2} and tau["excluded"] == 2
    assert tau["user_timeouts"] == 4 and tau["user_retries"] == 2 and tau["user_failures"] == 2
    saved = json.loads((tmp_path / "summary.json").read_text())["gyms"]["tau"]
    assert saved["user_timeouts"] == 4
    from rich.console import Console

    console = Console(width=250, record=True)
    console.print(summary_table(summaries, "t"))
    text = " ".join(console.export_text().split())
    assert "user: the LLM user's retries/429 answers/timed-out attempts" in text and "2/0/4" in text
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    run = client.get_run((tmp_path / "mlflow_run_id").read_text().strip())
    assert run.data.metrics["tau/user_timeouts"] == 4.0
    assert run.data.metrics["tau/user_rate_limited"] == 0.0
