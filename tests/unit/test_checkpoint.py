"""Checkpoint directory rules: only complete `global_step_N` folders count; partial writes (checkpoints
and HF exports) are removed; periodic exports need periodic checkpoints."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from mua.config.train import CheckpointConfig
from mua.train.checkpoint import latest_checkpoint, list_checkpoints, remove_partial


def _complete(root, step):
    d = root / "checkpoints" / f"global_step_{step}"
    d.mkdir(parents=True)
    (d / "trainer_state.pt").write_bytes(b"x")
    return d


def test_latest_ignores_partial_and_incomplete(tmp_path):
    _complete(tmp_path, 2)
    ten = _complete(tmp_path, 10)
    (tmp_path / "checkpoints" / ".tmp-global_step_12").mkdir()
    (tmp_path / "checkpoints" / "global_step_11").mkdir()  # no trainer state: not complete
    assert [s for s, _ in list_checkpoints(tmp_path)] == [2, 10]
    assert latest_checkpoint(tmp_path) == ten
    remove_partial(tmp_path)
    assert not (tmp_path / "checkpoints" / ".tmp-global_step_12").exists()


def test_no_checkpoints(tmp_path):
    assert latest_checkpoint(tmp_path) is None


def test_remove_partial_sweeps_killed_hf_exports_and_keeps_complete_ones(tmp_path):
    hf = tmp_path / "hf"
    for name in ("global_step_2", "final", ".tmp-global_step_4", "..tmp-global_step_4.tmp-123"):
        (hf / name).mkdir(parents=True)
    remove_partial(tmp_path)
    assert sorted(p.name for p in hf.iterdir()) == ["final", "global_step_2"]


def test_export_every_needs_periodic_checkpoints():
    assert CheckpointConfig(save_freq=5, export_hf_every=2).export_hf_every == 2
    with pytest.raises(ValidationError, match="save_freq"):
        CheckpointConfig(save_freq=0, export_hf_every=2)
