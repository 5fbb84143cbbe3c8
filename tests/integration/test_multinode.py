"""The multi-node path of `mua train`: two launchers on 127.0.0.1 (`--nnodes 2 --node-rank R
--rdzv-endpoint`) form one process group, train GRPO together and rank 0 writes the checkpoint."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.conftest import free_port
from tests.integration.grpo_helpers import shared_guess_setup, write_rl_recipe
from tests.integration.train_helpers import REPO, metric_history

pytestmark = pytest.mark.integration


def _launch(recipe, node_rank: int, port: int) -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "COLUMNS": "200"}
    env.pop("MLFLOW_TRACKING_URI", None)
    cmd = [
        sys.executable,
        "-m",
        "mua.cli.main",
        "train",
        str(recipe),
        "--nnodes",
        "2",
        "--node-rank",
        str(node_rank),
        "--rdzv-endpoint",
        f"127.0.0.1:{port}",
    ]
    return subprocess.Popen(
        cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def test_two_nodes_train_together(tmp_path_factory, tmp_path):
    model, train, test = shared_guess_setup(tmp_path_factory)
    recipe = write_rl_recipe(tmp_path, model, train, total_steps=2, checkpoint={"save_freq": 0})
    port = free_port()
    nodes = [_launch(recipe, rank, port) for rank in (0, 1)]
    outputs = []
    try:
        for proc in nodes:
            outputs.append(proc.communicate(timeout=300))
    finally:
        for proc in nodes:
            if proc.poll() is None:
                proc.kill()
    for proc, (_, err) in zip(nodes, outputs, strict=False):
        assert proc.returncode == 0, err[-3000:]
    run = tmp_path / "run"
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["global_step_2"]
    assert (run / "checkpoints" / "global_step_2" / "trainer_state.pt").exists()
    assert (run / "hf" / "final" / "model.safetensors").exists()
    assert len(metric_history(run, "loss")) == 2
    assert metric_history(run, "filter/samples_trained")[0] == 16.0  # both nodes' rollouts counted
