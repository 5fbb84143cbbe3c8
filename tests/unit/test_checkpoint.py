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


def _saved(run_dir, step):
    import torch

    from mua.train.checkpoint import save_checkpoint

    torch.manual_seed(step)
    model = torch.nn.Linear(64, 64)
    optimizer = torch.optim.AdamW(model.parameters())
    model(torch.randn(2, 64)).sum().backward()
    optimizer.step()
    return save_checkpoint(
        run_dir, step, model=model, optimizer=optimizer, trainer_state={}, rank=0, keep_last=5
    )


def test_checksums_catch_overwritten_truncated_and_missing_files(tmp_path):
    from mua.distributed.checksums import CHECKSUMS, checkpoint_problem
    from mua.train.checkpoint import damaged_message

    first, second = _saved(tmp_path, 1), _saved(tmp_path, 2)
    assert (second / CHECKSUMS).exists() and checkpoint_problem(second) is None
    shard = next(second.glob("*.distcp"))
    data = bytearray(shard.read_bytes())
    data[100:108] = b"\x7f" * 8  # same size, other bytes
    shard.write_bytes(bytes(data))
    assert "does not match its checksum" in checkpoint_problem(second)
    message = damaged_message(tmp_path, second, checkpoint_problem(second))
    assert str(second) in message and "--resume-from global_step_1" in message
    shard.write_bytes(bytes(data[:-10]))
    assert "truncated" in checkpoint_problem(second)
    (first / ".metadata").unlink()
    assert checkpoint_problem(first) == ".metadata is missing"
    assert "no earlier complete checkpoint" in damaged_message(tmp_path, second, "x")
