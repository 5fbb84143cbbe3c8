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
