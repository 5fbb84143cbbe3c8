"""`make demo` end to end in its smoke-test form (`python -m mua.demo --quick`): every phase runs
through the real CLI, the report prints, and every output the demo points at exists."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]


def test_quick_demo_runs_every_phase_and_reports(tmp_path):
    out = tmp_path / "demo"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "COLUMNS": "200"}
    env.pop("MLFLOW_TRACKING_URI", None)
    res = subprocess.run(
        [sys.executable, "-m", "mua.demo", "--quick", "--out", str(out)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-3000:]
    lines = res.stdout.splitlines()
    for i, phase in enumerate(
        ["prep", "expert", "sft", "eval sft", "rl", "merge", "eval rl"], start=1
    ):
        assert any(line.startswith(f"[{i}/7] {phase} ") for line in lines), phase
    assert (
        "after SFT (start)" in res.stdout
        and "after GRPO" in res.stdout
        and "mlflow ui" in res.stdout
    )
    # quiet: no library warnings, MLflow log lines or progress bars, on screen or in the logs
    for text in [res.stdout, res.stderr, *(p.read_text() for p in (out / "logs").iterdir())]:
        for noise in ("Warning", " INFO ", "it/s]", "Loading weights", "Writing model shards"):
            assert noise not in text, noise
    # `mua view` over the demo: the RL steps' transcripts and both evaluations
    page = (out / "view.html").read_text()
    assert "data-ckpt='rl@1'" in page and "data-ckpt='eval_sft'" in page
    assert "data-ckpt='eval_rl'" in page and "k-trained" in page
    merged = out / "rl" / "hf" / "global_step_2"
    assert json.loads((merged / "merge_info.json").read_text())["verify_max_logit_diff"] <= 1e-5
    before = json.loads((out / "eval_sft" / "summary.json").read_text())
    after = json.loads((out / "eval_rl" / "summary.json").read_text())
    assert before["gyms"]["guess"]["num_tasks"] == after["gyms"]["guess"]["num_tasks"] == 4
    assert after["model_dir"] == str(merged)
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{out / 'mlflow.db'}")
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()])
    assert len(runs) == 4  # SFT, GRPO and the two evaluations share one store


def test_a_failing_phase_stops_the_demo_with_its_log(tmp_path, monkeypatch):
    from mua import demo

    def broken(out, seed, quick=False, rl_recipe="quickstart.yaml"):
        return [("prep", demo._mua("prep", "--gym", "no_such_gym", "--out", str(out / "data")))]

    monkeypatch.setattr(demo, "_phases", broken)
    with pytest.raises(demo.PhaseFailed, match=r"(?s)phase .prep. failed.*unknown gym"):
        demo.run_demo(tmp_path / "d")
