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


def test_log_step_keeps_non_finite_values(tmp_path):
    import math

    from mlflow.tracking import MlflowClient

    from mua.config import load_recipe
    from mua.track import Tracker

    recipe = load_recipe(None, [f"run_dir={tmp_path}"], verb="train")
    tracker = Tracker(recipe, tmp_path, enabled=True, console=False)
    tracker.log_step(1, {"loss": float("nan"), "grad_norm": float("inf"), "reward/mean": 0.5})
    tracker.close("FAILED")
    client = MlflowClient(f"sqlite:///{tmp_path.resolve() / 'mlflow.db'}")
    run_id = (tmp_path / "mlflow_run_id").read_text().strip()
    assert math.isnan(client.get_metric_history(run_id, "loss")[0].value)
    assert client.get_metric_history(run_id, "grad_norm")[0].value > 1e300
    assert client.get_run(run_id).info.status == "FAILED"


def test_artifacts_stay_beside_the_store_not_in_the_working_folder(tmp_path, monkeypatch):
    from mlflow.tracking import MlflowClient

    from mua.config import load_recipe
    from mua.track import Tracker

    run_dir, elsewhere = tmp_path / "run", tmp_path / "cwd"
    run_dir.mkdir()
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    recipe = load_recipe(None, [f"run_dir={run_dir}"], verb="train")
    (run_dir / "recipe.resolved.yaml").write_text("total_steps: 1\n")
    tracker = Tracker(recipe, run_dir, enabled=True, console=False)
    tracker.close("FINISHED")
    assert list(elsewhere.iterdir()) == []  # no ./mlruns where the command was started
    client = MlflowClient(f"sqlite:///{run_dir.resolve() / 'mlflow.db'}")
    run_id = (run_dir / "mlflow_run_id").read_text().strip()
    assert [a.path for a in client.list_artifacts(run_id)] == ["recipe.resolved.yaml"]
    assert list((run_dir / "mlartifacts").rglob("recipe.resolved.yaml"))
