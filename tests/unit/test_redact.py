"""Credentials in URLs never reach files, MLflow or messages."""

from __future__ import annotations

import json

import pytest

from mua.redact import redact_text, redact_urls


@pytest.mark.parametrize(
    ("url", "want"),
    [
        ("http://u:sk-abc123@host:8000/v1", "http://***@host:8000/v1"),
        ("https://sk-abc123@api.example.com/v1", "https://***@api.example.com/v1"),
        ("http://host/v1?key=sk-abc&model=m", "http://host/v1?key=***&model=m"),
        ("http://host/v1?model=m&api_key=sk-abc", "http://host/v1?model=m&api_key=***"),
        ("http://host/v1?access_token=t1#frag", "http://host/v1?access_token=***#frag"),
        ("http://host/v1?X-Amz-Signature=abc&a=1", "http://host/v1?X-Amz-Signature=***&a=1"),
        ("http://127.0.0.1:30000/v1", "http://127.0.0.1:30000/v1"),
        ("http://host/v1?monkey=1", "http://host/v1?monkey=***"),  # errs on the safe side
    ],
)
def test_url_credentials_are_masked(url, want):
    assert redact_text(url) == want


def test_urls_inside_text_and_structures():
    text = "user at http://u:sk-1@h/v1 (model m) gave no reply; see https://h2/?token=zz."
    out = redact_text(text)
    assert "sk-1" not in out and "zz" not in out
    assert out.startswith("user at http://***@h/v1 (model m)")
    tree = {"user": {"base_url": "http://a:b@h/v1", "n": 3}, "l": ["x", ("http://h/?key=k",)]}
    assert redact_urls(tree) == {
        "user": {"base_url": "http://***@h/v1", "n": 3},
        "l": ["x", ("http://h/?key=***",)],
    }
    assert redact_text("no url: user:pass@host") == "no url: user:pass@host"


SECRET_URL = "http://u:sk-user-secret@127.0.0.1:9/v1?api_key=sk-query-secret"


def test_resolved_recipe_is_written_redacted_and_read_back_whole(tmp_path, monkeypatch):
    from mua.config import load_recipe, read_resolved, write_resolved
    from mua.config.resolved import URL_SECRETS_ENV

    monkeypatch.setenv(URL_SECRETS_ENV, "{}")  # restored (unset) after the test
    recipe = load_recipe(
        None, ["user.kind=llm", f"user.base_url={SECRET_URL}", f"run_dir={tmp_path}"], verb="train"
    )
    path = write_resolved(recipe, tmp_path)
    text = path.read_text()
    assert "sk-user-secret" not in text and "sk-query-secret" not in text
    assert "http://***@127.0.0.1:9/v1?api_key=***" in text
    assert read_resolved(tmp_path).user.base_url == SECRET_URL  # a rank started by this launcher
    monkeypatch.setenv(URL_SECRETS_ENV, "")  # a rank started without the mapping
    assert read_resolved(tmp_path).user.base_url == "http://***@127.0.0.1:9/v1?api_key=***"


def test_error_lines_user_failures_and_mlflow_params_are_redacted():
    from mua.errors import RunFailure, UsageError
    from mua.gym.api import UserFailure
    from mua.track.tracker import flatten_params

    for err in (RunFailure, UsageError, UserFailure):
        assert "sk-user-secret" not in str(err(f"user at {SECRET_URL} refused"))
    params = flatten_params({"user": {"base_url": SECRET_URL, "kind": "llm"}})
    assert params == {"user.base_url": "http://***@127.0.0.1:9/v1?api_key=***", "user.kind": "llm"}


def test_eval_writes_no_url_credentials_anywhere(tmp_path, monkeypatch):
    from mua.config import load_recipe

    # mlflow.set_tracking_uri exports the URI; restore the environment after the test
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    from mua.eval.session import run_evaluation
    from tests.fakes.fake_openai import FakeOpenAIServer

    with FakeOpenAIServer(lambda request: "[answer] 8") as server:
        agent_url = server.base_url.replace("://", "://agent:sk-agent-secret@")
        user_url = server.base_url.replace("://", "://u:sk-user-secret@")  # preflight asks it
        recipe = load_recipe(
            None,
            [
                "user.kind=llm",
                f"user.base_url={user_url}",
                f"rollout.openai.base_url={agent_url}",
                "rollout.max_turns=1",
                "eval.max_tasks=2",
            ],
            verb="eval",
        )
        run_evaluation(recipe, model="openai:fake", gyms=["guess"], out_dir=tmp_path / "out")
        assert server.total_requests >= 2
        shown = server.base_url.replace("://", "://***@")
    written = [p for p in (tmp_path / "out").iterdir() if p.is_file() and p.suffix != ".db"]
    assert {p.name for p in written} >= {"results.jsonl", "summary.json", "eval_config.json"}
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    run = client.get_run((tmp_path / "out" / "mlflow_run_id").read_text().strip())
    texts = [p.read_text() for p in written] + [json.dumps(run.data.params)]
    for secret in ("sk-user-secret", "sk-agent-secret"):
        assert not any(secret in t for t in texts), secret
    assert run.data.params["user.base_url"] == shown
    config = json.loads((tmp_path / "out" / "eval_config.json").read_text())
    assert config["agent_endpoint"].startswith("http://***@127.0.0.1:")


def test_env_maps_keep_their_names_and_lose_their_values_anywhere():
    from mua.redact import mask_env_maps, redact_secrets

    tree = {
        "gyms": [{"program": {"env": {"DB_PASS": "db-value", "SERPER_KEY": "s-value"}}}],
        "options": {"env": {"AWS_SECRET_ACCESS_KEY": "aws-value"}, "envs": ["kept"]},
    }
    want = {
        "gyms": [{"program": {"env": {"DB_PASS": "<set>", "SERPER_KEY": "<set>"}}}],
        "options": {"env": {"AWS_SECRET_ACCESS_KEY": "<set>"}, "envs": ["kept"]},
    }
    assert redact_secrets(tree) == want
    assert mask_env_maps(tree) == want
