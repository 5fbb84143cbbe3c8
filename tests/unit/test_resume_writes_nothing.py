"""A resume that fails to start leaves the run dir as it was: the new recipe and its recorded
changes take the place of the old ones only once the ranks have loaded the checkpoint. A change
that alters the checkpoint's tensor shapes (LoRA rank, targets) is refused up front, naming the
setting, even with --allow-recipe-change (it is not damage)."""

from __future__ import annotations

import pytest
import yaml

from mua.config import load_recipe, write_resolved
from mua.config.resolved import RESOLVED_NAME
from mua.errors import UsageError
from mua.train import launcher
from mua.train import run_dir as rd


def _recipe(tmp_path, *overrides):
    return load_recipe(None, [f"run_dir={tmp_path}", *overrides], verb="train")


def _resumable(tmp_path, *overrides) -> str:
    rd.claim(tmp_path)
    write_resolved(_recipe(tmp_path, *overrides), tmp_path)
    step = tmp_path / "checkpoints" / "global_step_2"
    step.mkdir(parents=True)
    (step / "trainer_state.pt").write_bytes(b"x")
    return (tmp_path / RESOLVED_NAME).read_text()


def test_a_changed_lora_rank_is_refused_naming_the_setting(tmp_path):
    before = _resumable(tmp_path, "model.lora.rank=16")
    changed = _recipe(tmp_path, "model.lora.rank=8")
    with pytest.raises(UsageError) as err:
        rd.check_resume_recipe(tmp_path, changed, resume=True, allow_change=True)
    message = str(err.value)
    assert "model.lora.rank 16 → 8" in message and "damaged" not in message
    assert "\n" not in message
    assert (tmp_path / RESOLVED_NAME).read_text() == before
    assert not (tmp_path / rd.CHANGES).exists()


def test_a_failed_start_of_an_allowed_change_writes_nothing(tmp_path, monkeypatch):
    before = _resumable(tmp_path, "optim.lr=0.001")
    monkeypatch.setattr(launcher, "check_inputs", lambda recipe: None)
    monkeypatch.setattr(launcher, "_run_ranks", lambda cmd, env, pass_fds: 1)  # ranks failed
    changed = _recipe(tmp_path, "optim.lr=0.0005", "algo.kind=sft")
    with pytest.raises(SystemExit):
        launcher.launch(changed, allow_recipe_change=True)
    assert (tmp_path / RESOLVED_NAME).read_text() == before
    assert not (tmp_path / rd.CHANGES).exists()
    # the original command still resumes: its recipe is the one on disk
    rd.check_resume_recipe(
        tmp_path, _recipe(tmp_path, "optim.lr=0.001"), resume=True, allow_change=False
    )


def test_the_new_recipe_takes_effect_once_the_checkpoint_loaded(tmp_path):
    _resumable(tmp_path, "optim.lr=0.001")
    changed = _recipe(tmp_path, "optim.lr=0.0005")
    changes = rd.check_resume_recipe(tmp_path, changed, resume=True, allow_change=True)
    rd.stage(tmp_path, changed, changes, resuming=True)
    assert rd.recipe_file(tmp_path).name == rd.PENDING  # what the ranks read
    rd.promote(tmp_path)  # rank 0, after every rank loaded the checkpoint
    assert rd.recipe_file(tmp_path).name == RESOLVED_NAME
    assert yaml.safe_load((tmp_path / RESOLVED_NAME).read_text())["recipe"]["optim"]["lr"] == 5e-4
    record = yaml.safe_load((tmp_path / rd.CHANGES).read_text())[-1]["changes"]
    assert record["optim.lr"] == {"from": 0.001, "to": 0.0005, "took_effect": True}
