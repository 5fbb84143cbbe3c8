"""scripts/compare_runs.py: two runs are identical only when every non-wall-clock metric and
every final weight match bit for bit."""

from __future__ import annotations

import sqlite3

import torch
from safetensors.torch import save_file

from tests.conftest import load_script


def _run(path, metrics: dict, weight: torch.Tensor):
    (path / "hf" / "final").mkdir(parents=True)
    con = sqlite3.connect(path / "mlflow.db")
    con.execute("CREATE TABLE metrics (key TEXT, value REAL, timestamp INT, step INT, is_nan INT)")
    for i, ((key, step), value) in enumerate(metrics.items()):
        con.execute("INSERT INTO metrics VALUES (?, ?, ?, ?, 0)", (key, value, i, step))
    con.commit()
    con.close()
    save_file({"w": weight}, str(path / "hf" / "final" / "model.safetensors"))
    return path


BASE = {("loss", 1): 0.5, ("reward/mean", 1): 0.25, ("time/step_s", 1): 3.0}


def test_identical_runs_and_each_kind_of_difference(tmp_path, capsys):
    compare = load_script("compare_runs").main
    w = torch.arange(6, dtype=torch.float32)
    a = _run(tmp_path / "a", BASE, w)
    same = _run(tmp_path / "same", {**BASE, ("time/step_s", 1): 9.0}, w.clone())
    assert compare([str(a), str(same)]) == 0  # wall-clock time differs: left out
    assert "identical" in capsys.readouterr().out

    nudged = _run(tmp_path / "nudged", {**BASE, ("loss", 1): 0.5000000000000001}, w)
    assert compare([str(a), str(nudged)]) == 1
    assert "metric loss step 1" in capsys.readouterr().out
    assert compare([str(a), str(nudged), "--skip", "loss"]) == 0

    missing = _run(tmp_path / "missing", {("loss", 1): 0.5}, w)
    assert compare([str(a), str(missing)]) == 1
    assert "reward/mean step 1: missing in the second run" in capsys.readouterr().out

    w2 = w.clone()
    w2[3] = torch.nextafter(w2[3], torch.tensor(100.0))
    moved = _run(tmp_path / "moved", BASE, w2)
    assert compare([str(a), str(moved)]) == 1
    assert "weight w: differs" in capsys.readouterr().out
