"""Tracking helpers: flattened parameters keep env-var names and drop secret-looking values; URIs."""

from __future__ import annotations

import json

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


def _store_full(*args, **kwargs):
    """What MLflow raises when its SQLite store is on a full disk: its own exception, from
    SQLAlchemy's, from the driver's (the only useful message, at the bottom of the chain)."""
    import sqlite3

    from mlflow.exceptions import MlflowException

    try:
        try:
            raise sqlite3.OperationalError("database or disk is full")
        except sqlite3.OperationalError as driver:
            raise RuntimeError("(raised as a result of Query-invoked autoflush; ...)") from driver
    except RuntimeError as wrapped:
        raise MlflowException("(raised as a result of Query-invoked autoflush; ...)") from wrapped


def _open_tracker(tmp_path, **kwargs):
    from mua.config import load_recipe
    from mua.track import Tracker

    recipe = load_recipe(None, [f"run_dir={tmp_path}"], verb="train")
    return Tracker(recipe, tmp_path, enabled=True, console=False, **kwargs)


def test_a_store_that_cannot_be_written_gives_one_line_and_closing_a_failed_run_does_not_fail(
    tmp_path, monkeypatch, capsys
):
    import mlflow
    import pytest

    from mua.errors import RunFailure

    tracker = _open_tracker(tmp_path)
    monkeypatch.setattr(mlflow, "log_metrics", _store_full)
    monkeypatch.setattr(mlflow, "end_run", _store_full)
    with pytest.raises(RunFailure) as failed:
        tracker.log_step(3, {"loss": 1.0})
    (line,) = str(failed.value).splitlines()
    assert line.startswith("cannot write the metrics of step 3 to sqlite:///")
    assert "(OperationalError: database or disk is full)" in line
    assert "run the same command to resume" in line
    tracker.close("FAILED")  # the failure path does not fail again
    with pytest.raises(RunFailure, match="cannot write the end of the run"):
        tracker.close("FINISHED")  # a finished run that cannot be recorded says so
    assert "Traceback" not in capsys.readouterr().err
    monkeypatch.undo()
    mlflow.end_run()  # the run the broken store could not end: the next test starts its own


def test_a_resumed_run_keeps_one_metrics_row_per_step(tmp_path):
    from mua.track.run_files import METRICS_FILE, read_metrics

    tracker = _open_tracker(tmp_path)
    for step in (1, 2, 3):
        tracker.log_step(step, {"loss": float(step)})
    tracker.close("KILLED")
    with open(tmp_path / METRICS_FILE, "a") as f:
        f.write('{"step": 4, "lo')  # a row torn by the kill
    tracker = _open_tracker(tmp_path, start_step=2)  # resumed from the checkpoint of step 2
    tracker.log_step(3, {"loss": 30.0})
    tracker.close("FINISHED")
    rows = [json.loads(line) for line in (tmp_path / METRICS_FILE).read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3]
    assert rows[-1]["loss"] == 30.0 and read_metrics(tmp_path)[-1]["loss"] == 30.0


def test_a_resumed_run_stores_each_step_once_in_mlflow(tmp_path):
    from mlflow.tracking import MlflowClient

    tracker = _open_tracker(tmp_path)
    for step in (1, 2, 3):
        tracker.log_step(step, {"loss": float(step), "grad_norm": 1.0})
    tracker.close("KILLED")
    tracker = _open_tracker(tmp_path, start_step=2)  # resumed from the checkpoint of step 2
    for step in (3, 4):
        tracker.log_step(step, {"loss": float(step), "grad_norm": 1.0, "val/reward_mean": 0.5})
    tracker.close("FINISHED")
    client = MlflowClient(f"sqlite:///{tmp_path.resolve() / 'mlflow.db'}")
    run_id = (tmp_path / "mlflow_run_id").read_text().strip()
    for key, steps in (("loss", [1, 2, 3, 4]), ("grad_norm", [1, 2, 3, 4])):
        assert sorted(m.step for m in client.get_metric_history(run_id, key)) == steps, key
    # a metric the first run never stored is stored from the resumed run's first step
    assert sorted(m.step for m in client.get_metric_history(run_id, "val/reward_mean")) == [3, 4]
