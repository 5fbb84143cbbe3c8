"""No file mua writes holds a credential: URL user-info and secret query parameters, and the
values of keys named like secrets (headers such as Authorization, `OPENAI_API_KEY`), in eval
configs, summaries, MLflow params, recipe change records; recipes refuse them written inline."""

from __future__ import annotations

import json

import pytest

from mua.redact import redact_secrets

JUDGE = {
    "base_url": "http://judge:pw-judge-secret@127.0.0.1:9/v1?key=k-query-secret",
    "model": "j",
    "headers": {"Authorization": "Bearer b-header-secret", "X-Trace": "t1"},
    "env": {"OPENAI_API_KEY": "k-env-secret"},
    "api_key_env": "JUDGE_KEY",
}
SECRETS = ("pw-judge-secret", "k-query-secret", "b-header-secret", "k-env-secret")


def _clean(text: str) -> None:
    for secret in SECRETS:
        assert secret not in text, secret


def test_secret_named_keys_and_url_credentials_are_masked():
    out = redact_secrets({"gym_options": {"tau2": {"judge": JUDGE}}, "max_tokens": 5})
    _clean(json.dumps(out))
    judge = out["gym_options"]["tau2"]["judge"]
    assert judge["api_key_env"] == "JUDGE_KEY" and judge["headers"]["X-Trace"] == "t1"
    assert judge["base_url"] == "http://***@127.0.0.1:9/v1?key=***"
    assert out["max_tokens"] == 5


def test_eval_config_holds_no_judge_credentials_and_still_resumes(tmp_path):
    from mua.eval.store import CONFIG_FILE, ResultStore

    fingerprint = {"model": "m", "gym_options": {"tau2": {"judge": JUDGE}}}
    ResultStore(tmp_path, fingerprint).close()
    _clean((tmp_path / CONFIG_FILE).read_text())
    (tmp_path / "results.jsonl").write_text(
        json.dumps({"gym": "tau2", "task_id": "t", "sample_index": 0, "excluded": False}) + "\n"
    )
    store = ResultStore(tmp_path, fingerprint)  # the same settings resume
    assert store.has(("tau2", "t", 0))
    store.close()


def test_summary_and_mlflow_params_hold_no_credentials(tmp_path):
    from mua.eval.report import write_summary
    from mua.track.tracker import flatten_params

    write_summary(tmp_path, {"tau2": {"reward_mean": 1.0}}, {"judge": JUDGE})
    _clean((tmp_path / "summary.json").read_text())
    params = flatten_params({"gym": {"options": {"judge": JUDGE}}, "rollout": {"max_turns": 3}})
    _clean(json.dumps(params))
    assert params["rollout.max_turns"] == "3"
    assert params["gym.options.judge.api_key_env"] == "JUDGE_KEY"


def test_recipe_changes_record_no_credentials(tmp_path):
    import yaml

    from mua.config import load_recipe
    from mua.config.resolved import write_resolved
    from mua.train.run_dir import CHANGES, check_resume_recipe, promote, stage

    def recipe(url, lr):
        return load_recipe(
            None,
            ["user.kind=llm", f"user.base_url={url}", f"optim.lr={lr}", f"run_dir={tmp_path}"],
            verb="train",
        )

    url = "http://u:pw-judge-secret@127.0.0.1:9/v1"
    write_resolved(recipe(url, 1e-5), tmp_path)
    step = tmp_path / "checkpoints" / "global_step_1"
    step.mkdir(parents=True)
    (step / "trainer_state.pt").write_bytes(b"x")
    # the same recipe resumes (its URL compares equal to the redacted one written)
    check_resume_recipe(tmp_path, recipe(url, 1e-5), resume=True, allow_change=False)
    changed = recipe(url.replace("pw-", "pw2-"), 2e-5)
    changes = check_resume_recipe(tmp_path, changed, resume=True, allow_change=True)
    stage(tmp_path, changed, changes, resuming=True)
    promote(tmp_path)
    text = (tmp_path / CHANGES).read_text()
    _clean(text)
    assert "pw2-judge-secret" not in text
    assert list(yaml.safe_load(text)[0]["changes"]) == ["optim.lr"]


@pytest.mark.parametrize("key", ["Authorization", "OPENAI_API_KEY", "cookie"])
def test_a_recipe_with_a_secret_named_key_inline_is_refused(key):
    from mua.config import load_recipe
    from mua.errors import UsageError

    with pytest.raises(UsageError, match="secret written inline"):
        load_recipe(None, [f"gym.options.headers.{key}=abc123"], verb="train")


# -- environment maps: their names are written, never their values -------------------------------

ENV = {"SERPER_KEY": "serper-value-1", "AWS_SECRET_ACCESS_KEY": "aws-value-2", "DB_PASS": "db-3x"}
# the program writes what it sees of its env map's variables to the file it is given
SEES_ENV = (
    "import json, os, sys; "
    f"json.dump({{k: os.environ.get(k) for k in {list(ENV)!r}}}, open(sys.argv[1], 'w')); "
    "print(json.dumps({'reward': 1.0}))"
)


def _program_recipe(tmp_path, verb: str = "train"):
    import sys

    import yaml

    from mua.config import load_recipe

    entry = {
        "name": "guess",
        "options": {"env": {"GUESS_OPTION_X": "option-value-4"}},  # any `env:` map
        "program": {
            "command": [sys.executable, "-c", SEES_ENV, str(tmp_path / "seen.json")],
            "env": ENV,
        },
    }
    path = tmp_path / f"{verb}.yaml"
    path.write_text(yaml.safe_dump({"gyms": [entry], "run_dir": str(tmp_path / "run")}))
    return load_recipe(str(path), [], verb=verb)


def _no_env_values(text: str) -> None:
    for value in (*ENV.values(), "option-value-4"):
        assert value not in text, value


@pytest.fixture
def env_vars(monkeypatch):
    """The variables `write_resolved` sets for the ranks, restored (unset) after the test."""
    from mua.config.resolved import ENV_VALUES_ENV, URL_SECRETS_ENV

    monkeypatch.setenv(ENV_VALUES_ENV, "[]")
    monkeypatch.setenv(URL_SECRETS_ENV, "{}")
    return ENV_VALUES_ENV


def test_the_resolved_recipe_names_env_variables_and_a_rank_runs_the_program_with_their_values(
    tmp_path, env_vars
):
    import os
    import subprocess
    import sys

    import yaml

    from mua.config import write_resolved

    run_dir = tmp_path / "run"
    text = write_resolved(_program_recipe(tmp_path), run_dir).read_text()
    _no_env_values(text)
    entry = yaml.safe_load(text)["recipe"]["gyms"][0]
    assert entry["program"]["env"] == {k: "<set>" for k in ENV}
    assert entry["options"]["env"] == {"GUESS_OPTION_X": "<set>"}
    rank = (  # what a torchrun rank does: read the resolved recipe, run the entry's program
        "import asyncio, sys; from mua.config import read_resolved; "
        "from mua.gateway.program import _run_command; "
        "recipe = read_resolved(sys.argv[1]); "
        "print(asyncio.run(_run_command(recipe.gyms[0].program, {})).reward)"
    )
    command = [sys.executable, "-c", rank, str(run_dir)]
    res = subprocess.run(command, capture_output=True, text=True)  # inherits this environment
    assert res.returncode == 0 and res.stdout.split()[-1] == "1.0", res.stderr
    assert json.loads((tmp_path / "seen.json").read_text()) == ENV  # the program saw each value
    # a rank started without them is refused, never run with `<set>` for values
    res = subprocess.run(command, capture_output=True, text=True, env={**os.environ, env_vars: ""})
    assert res.returncode == 1 and "gyms.0.options.env holds only the names" in res.stderr


def test_mlflow_params_and_eval_config_hold_env_names_not_values(tmp_path, env_vars):
    from mlflow.tracking import MlflowClient

    from mua.eval.fingerprint import eval_fingerprint
    from mua.eval.store import CONFIG_FILE, ResultStore
    from mua.run.spec import run_spec
    from mua.track import Tracker

    recipe = _program_recipe(tmp_path)
    run_dir = tmp_path / "run"
    Tracker(recipe, run_dir, enabled=True, console=False).close("FINISHED")
    client = MlflowClient(f"sqlite:///{run_dir.resolve() / 'mlflow.db'}")
    params = client.get_run((run_dir / "mlflow_run_id").read_text().strip()).data.params
    _no_env_values(json.dumps(params))
    assert "{'env': {'GUESS_OPTION_X': '<set>'}}" in params["gyms"]
    recipe = _program_recipe(tmp_path, verb="eval")
    entries = {entry.key: run_spec(recipe, entry) for entry in recipe.gym_sections()}
    ResultStore(tmp_path / "eval", eval_fingerprint(recipe, "m", "m", None, entries)).close()
    config = json.loads((tmp_path / "eval" / CONFIG_FILE).read_text())
    _no_env_values(json.dumps(config))
    assert config["gyms"]["guess"]["program"]["env"] == {k: "<set>" for k in ENV}
