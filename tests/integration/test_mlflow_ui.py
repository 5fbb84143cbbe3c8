"""The `mlflow ui` command mua prints, run as printed where the `ui` extra is installed: the
server answers on its port with MLflow's UI and the store's runs, and `mlflow.search_runs` reads
the same store. Skipped, saying so, where only mlflow-skinny is installed (the printed command
then installs the extra first; tests/unit/test_first_hour.py checks that form)."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import time
import urllib.error
import urllib.request

import pytest

from mua.track.console import mlflow_ui_command, ui_server_installed
from tests.conftest import free_port

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _get(url: str, body: dict | None = None) -> tuple[int, str]:
    data = json.dumps(body).encode() if body is not None else None
    headers = {"Content-Type": "application/json"} if body is not None else {}
    req = urllib.request.Request(url, data=data, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=30) as res:
            return res.status, res.read().decode("utf-8", "replace")
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return 0, ""


def _stop_group(server: subprocess.Popen) -> None:
    """Stop the server and the workers it started (its own process group)."""
    for sig, wait_s in ((signal.SIGTERM, 90), (signal.SIGKILL, 30)):
        try:
            os.killpg(server.pid, sig)
        except ProcessLookupError:
            return
        try:
            server.wait(timeout=wait_s)
            return
        except subprocess.TimeoutExpired:
            continue


@pytest.mark.skipif(
    not ui_server_installed(),
    reason="the `ui` extra (full mlflow) is not installed: no `mlflow ui` to start here",
)
def test_printed_mlflow_ui_command_serves_the_store(tmp_path):
    import mlflow
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(tracking_uri=uri)
    experiment = client.create_experiment("first-hour", artifact_location=str(tmp_path / "art"))
    run = client.create_run(experiment, run_name="rl")
    client.log_metric(run.info.run_id, "reward/mean", 0.5, step=1)
    client.set_terminated(run.info.run_id)

    command = mlflow_ui_command(uri)
    assert "pip install" not in command, command
    port = free_port()
    argv = [*shlex.split(command), "--host", "127.0.0.1", "--port", str(port)]
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    log = open(tmp_path / "mlflow-ui.log", "wb")
    server = subprocess.Popen(
        argv, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 300  # a loaded machine starts its workers slowly
        status, page = 0, ""
        while time.monotonic() < deadline and server.poll() is None:
            status, page = _get(base + "/")
            if status == 200:
                break
            time.sleep(1)
        tail = (tmp_path / "mlflow-ui.log").read_text(errors="replace")[-2000:]
        assert status == 200, f"`{command}` did not answer on {base}/ ({server.poll()}):\n{tail}"
        assert "<html" in page.lower()
        status, body = _get(
            base + "/ajax-api/2.0/mlflow/runs/search", {"experiment_ids": [experiment]}
        )
        assert status == 200 and [r["info"]["run_name"] for r in json.loads(body)["runs"]] == ["rl"]
    finally:
        _stop_group(server)
        log.close()

    mlflow.set_tracking_uri(uri)
    runs = mlflow.search_runs(experiment_ids=[experiment])  # needs pandas: the extra brings it
    assert list(runs["metrics.reward/mean"]) == [0.5]
