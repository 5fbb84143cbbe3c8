"""`mua train`'s run dir before any rank starts: only mua's or empty folders are written into, one
`mua train` at a time (a dead holder's lock is taken over), and a resumed run keeps its recipe
unless changes are allowed (then they are recorded once the checkpoint loaded)."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
import yaml

from mua.config import load_recipe, write_resolved
from mua.errors import UsageError
from mua.output_folders import MARKER
from mua.train import run_dir as rd


def test_a_users_folder_is_refused_and_left_alone(tmp_path):
    folder = tmp_path / "mine"
    (folder / "hf" / "final").mkdir(parents=True)
    (folder / "hf" / "final" / "my_model.bin").write_bytes(b"precious")
    with pytest.raises(UsageError, match="already holds files mua did not write"):
        rd.claim(folder)
    assert (folder / "hf" / "final" / "my_model.bin").read_bytes() == b"precious"
    assert not (folder / MARKER).exists()


def test_new_empty_and_marked_folders_are_claimed(tmp_path):
    rd.claim(tmp_path / "new" / "run")
    assert (tmp_path / "new" / "run" / MARKER).exists()
    (tmp_path / "empty").mkdir()
    rd.claim(tmp_path / "empty")
    (tmp_path / "empty" / "checkpoints").mkdir()
    rd.claim(tmp_path / "empty")  # marked: anything inside is mua's


def test_a_run_dir_of_an_older_mua_is_adopted(tmp_path):
    recipe = load_recipe(None, [f"run_dir={tmp_path / 'old'}"], verb="train")
    write_resolved(recipe, tmp_path / "old")
    (tmp_path / "old" / "checkpoints").mkdir()
    rd.claim(tmp_path / "old")
    assert (tmp_path / "old" / MARKER).exists()


_HOLD = (
    "import sys, time; from pathlib import Path; from mua.train.run_dir import RunLock; "
    "RunLock(Path(sys.argv[1])); print('locked', flush=True); time.sleep(60)"
)


def test_a_second_train_on_a_locked_run_dir_is_refused(tmp_path):
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLD, str(tmp_path)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(UsageError, match=f"in use by another `mua train` \\(pid {holder.pid}"):
            rd.RunLock(tmp_path)
    finally:
        holder.kill()
        holder.wait()


def test_the_lock_of_a_killed_process_is_taken_over(tmp_path, capsys):
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLD, str(tmp_path)], stdout=subprocess.PIPE, text=True
    )
    assert holder.stdout.readline().strip() == "locked"
    holder.kill()  # SIGKILL: no clean-up, the record stays in the lock file
    holder.wait()
    lock = rd.RunLock(tmp_path)
    assert f"took over the lock of pid {holder.pid}" in capsys.readouterr().out
    lock.release()
    rd.RunLock(tmp_path).release()  # a clean release leaves nothing to take over
    assert "took over" not in capsys.readouterr().out


def _resumable_run(tmp_path, *overrides):
    recipe = load_recipe(None, [f"run_dir={tmp_path}", *overrides], verb="train")
    write_resolved(recipe, tmp_path)
    step = tmp_path / "checkpoints" / "global_step_2"
    step.mkdir(parents=True)
    (step / "trainer_state.pt").write_bytes(b"x")
    return recipe


def test_resuming_with_a_changed_recipe_is_refused_with_the_differences(tmp_path):
    _resumable_run(tmp_path, "optim.lr=0.001")
    changed = load_recipe(
        None, [f"run_dir={tmp_path}", "optim.lr=0.0005", "total_steps=50"], verb="train"
    )
    with pytest.raises(UsageError) as err:
        rd.check_resume_recipe(tmp_path, changed, resume=True, allow_change=False)
    message = str(err.value)
    assert "optim.lr: 0.001 -> 0.0005" in message and "--allow-recipe-change" in message
    assert "total_steps" not in message  # extending a run is free
    # Not resuming, or nothing to resume from: nothing to refuse.
    rd.check_resume_recipe(tmp_path, changed, resume=False, allow_change=False)
    same = load_recipe(
        None, [f"run_dir={tmp_path}", "optim.lr=0.001", "total_steps=50"], verb="train"
    )
    rd.check_resume_recipe(tmp_path, same, resume=True, allow_change=False)


def test_allowed_changes_are_recorded_with_what_took_effect(tmp_path, capsys):
    _resumable_run(tmp_path, "optim.lr=0.001")
    changed = load_recipe(
        None, [f"run_dir={tmp_path}", "optim.lr=0.0005", "data.seed=7"], verb="train"
    )
    changes = rd.check_resume_recipe(tmp_path, changed, resume=True, allow_change=True)
    rd.stage(tmp_path, changed, changes, resuming=True)
    assert not (tmp_path / rd.CHANGES).exists()  # recorded once the checkpoint loaded
    rd.promote(tmp_path)
    out = capsys.readouterr().out
    assert "recipe change: optim.lr: 0.001 -> 0.0005" in out
    assert "data.seed: 0 -> 7 (no effect" in out
    record = yaml.safe_load((tmp_path / rd.CHANGES).read_text())[-1]["changes"]
    assert record["optim.lr"] == {"from": 0.001, "to": 0.0005, "took_effect": True}
    assert record["data.seed"]["took_effect"] is False


def test_lock_holder_record_names_pid_and_start(tmp_path):
    lock = rd.RunLock(tmp_path)
    try:
        text = (tmp_path / rd.LOCK).read_text()
        assert str(__import__("os").getpid()) in text and str(int(time.time()))[:5] in text
    finally:
        lock.release()


# ---- through `mua train` (each refusal comes before torchrun starts) ----------------------------


def _sft_recipe(tmp_path, run_dir):
    data = tmp_path / "sft.jsonl"
    data.write_text('{"token_ids": [5, 6, 7, 8], "loss_mask": [0, 1, 1, 1]}\n')
    path = tmp_path / "sft.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "model": {"path": "tiny:qwen2-1m"},
                "data": {"train_files": [str(data)]},
                "algo": {"kind": "sft"},
                "run_dir": str(run_dir),
            }
        )
    )
    return path


def _one_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    return lines[0]


def test_train_refuses_a_users_folder_with_one_line(mua_cli, tmp_path):
    folder = tmp_path / "mine"
    (folder / "hf" / "final").mkdir(parents=True)
    (folder / "hf" / "final" / "my_model.bin").write_bytes(b"precious")
    code, _, err = mua_cli("train", str(_sft_recipe(tmp_path, folder)))
    assert code == 2 and "already holds files mua did not write" in _one_line(err)
    assert (folder / "hf" / "final" / "my_model.bin").read_bytes() == b"precious"
    assert sorted(p.name for p in folder.iterdir()) == ["hf"]


def test_train_refuses_a_run_dir_in_use(mua_cli, tmp_path):
    run = tmp_path / "run"
    rd.claim(run)
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLD, str(run)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        code, _, err = mua_cli("train", str(_sft_recipe(tmp_path, run)))
        assert code == 2 and f"in use by another `mua train` (pid {holder.pid}" in _one_line(err)
    finally:
        holder.kill()
        holder.wait()


def test_train_refuses_a_changed_recipe_on_resume(mua_cli, tmp_path):
    run = tmp_path / "run"
    recipe = _sft_recipe(tmp_path, run)
    rd.claim(run)
    write_resolved(load_recipe(str(recipe), [], verb="train"), run)
    (run / "checkpoints" / "global_step_1").mkdir(parents=True)
    (run / "checkpoints" / "global_step_1" / "trainer_state.pt").write_bytes(b"x")
    code, _, err = mua_cli("train", str(recipe), "optim.lr=0.5")
    assert code == 2 and "optim.lr: 1e-05 -> 0.5" in _one_line(err)


def test_on_resume_the_recipes_optim_settings_take_effect():
    """The optimizer and schedule states loaded from a checkpoint carry the lr the run started
    with; the trainer puts the recipe's back (what --allow-recipe-change promises)."""
    from types import SimpleNamespace

    import torch

    from mua.config.train import OptimConfig
    from mua.train.optim import build_scheduler
    from mua.train.trainer import Trainer

    def parts(cfg):
        opt = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(2))], lr=cfg.lr)
        return opt, build_scheduler(opt, cfg, 10)

    old_cfg = OptimConfig(lr=1e-3, warmup_steps=4)
    opt, sched = parts(old_cfg)
    for _ in range(2):
        opt.step()
        sched.step()
    new_cfg = OptimConfig(lr=5e-4, warmup_steps=4, weight_decay=0.1)
    opt2, sched2 = parts(new_cfg)
    opt2.load_state_dict(opt.state_dict())
    sched2.load_state_dict(sched.state_dict())
    assert opt2.param_groups[0]["lr"] == pytest.approx(1e-3 * 3 / 4)  # the old run's, restored
    Trainer._apply_recipe_optim(
        SimpleNamespace(recipe=SimpleNamespace(optim=new_cfg), optimizer=opt2, scheduler=sched2)
    )
    assert opt2.param_groups[0]["lr"] == pytest.approx(5e-4 * 3 / 4)
    assert opt2.param_groups[0]["weight_decay"] == 0.1
    sched2.step()
    assert opt2.param_groups[0]["lr"] == pytest.approx(5e-4)  # warm-up done, from the new peak
