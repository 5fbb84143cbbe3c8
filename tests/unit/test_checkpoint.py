"""Checkpoint directory rules: only complete `global_step_N` folders count; partial writes are removed."""

from __future__ import annotations

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
