"""Tracking helpers: flattened parameters keep env-var names and drop secret-looking values; URIs."""

from __future__ import annotations

from mua.track import flatten_params, tracking_uri


def test_flatten_drops_secret_keys_but_keeps_env_names():
    flat = flatten_params(
        {"user": {"api_key_env": "OPENAI_API_KEY", "api_key": "sk-x"}, "optim": {"lr": 0.1}}
    )
    assert flat == {"user.api_key_env": "OPENAI_API_KEY", "optim.lr": "0.1"}


def test_tracking_uri_precedence(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    assert tracking_uri(None, tmp_path) == f"sqlite:///{tmp_path.resolve() / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "file:///x")
    assert tracking_uri(None, tmp_path) == "file:///x"
    assert tracking_uri("sqlite:///y.db", tmp_path) == "sqlite:///y.db"
