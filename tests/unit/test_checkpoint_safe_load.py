"""A resume loads trainer_state.pt and the RNG files with `weights_only=True`: mua's own states
(plain types and tensors) load back whole, and a file carrying a pickled object is refused with
one line instead of running it."""

from __future__ import annotations

import pathlib
import random

import pytest
import torch

from mua.errors import RunFailure
from mua.train import checkpoint as ckpt


class _RunsCode:
    def __init__(self, marker: pathlib.Path):
        self.marker = marker

    def __reduce__(self):
        return (pathlib.Path.touch, (self.marker,))


def _folder(tmp_path, trainer_state, rng=None) -> pathlib.Path:
    folder = tmp_path / "checkpoints" / "global_step_2"
    (folder / "rng").mkdir(parents=True)
    torch.save(trainer_state, folder / "trainer_state.pt")
    torch.save(rng if rng is not None else ckpt._rng_state(), folder / "rng" / "rank_0.pt")
    return folder


def _load(folder, monkeypatch):
    monkeypatch.setattr(ckpt, "load_dcp", lambda *a, **k: None)  # no tensors in these tests
    return ckpt.load_checkpoint(folder, model=torch.nn.Linear(2, 2), optimizer=None, rank=0)


def test_mua_states_load_back_with_weights_only(tmp_path, monkeypatch):
    model = torch.nn.Linear(2, 2)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1.0)
    state = {
        "step": 2,
        "data": {
            "consumed": 8,
            "sources": {"guess": {"consumed": 4}},
            "group_means": {"guess": {"t1": 0.5}},
            "reward_stats": {"guess": [3, 1.5, 0.25]},
        },
        "scheduler": scheduler.state_dict(),
        "world_size": 1,
        "algo": "grpo",
        "in_flight": [("guess", "t1")],
    }
    random.seed(7)
    folder = _folder(tmp_path, state)
    expected = random.random()
    random.seed(0)
    loaded = _load(folder, monkeypatch)
    assert loaded["data"] == state["data"] and loaded["step"] == 2
    assert loaded["in_flight"] == [("guess", "t1")]
    assert random.random() == expected  # the RNG state came back


@pytest.mark.parametrize("where", ["trainer_state", "rng"])
def test_a_file_with_a_pickled_object_is_refused_and_never_run(tmp_path, monkeypatch, where):
    marker = tmp_path / "code_ran"
    evil = {"step": 2, "scheduler": _RunsCode(marker)}
    if where == "trainer_state":
        folder = _folder(tmp_path, evil)
    else:
        folder = _folder(tmp_path, {"step": 2}, rng={"torch": _RunsCode(marker)})
    with pytest.raises(RunFailure) as err:
        _load(folder, monkeypatch)
    assert not marker.exists()
    message = str(err.value)
    assert "\n" not in message and "plain data" in message
