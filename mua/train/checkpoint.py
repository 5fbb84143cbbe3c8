"""Checkpoints of a training run: layout, atomic writes, retention, checksums, finding the latest.

A checkpoint is written under `checkpoints/.tmp-global_step_N` and renamed once every rank has
finished, so `global_step_N` is always complete; `checksums.json`, written last, is verified
before a resume loads anything. The layout is in docs/training.md. Test-only: the environment
variable `MUA_TEST_CHECKPOINT_DELAY_S` makes every rank wait before the rename.
Not here: deciding when to save (the trainer), HF exports.
"""

from __future__ import annotations

import os
import random
import re
import shutil
import time
from pathlib import Path

import torch

from mua.distributed import barrier
from mua.distributed.checksums import checkpoint_problem, write_checksums
from mua.distributed.dcp import load_dcp, save_dcp

_STEP_DIR = re.compile(r"^global_step_(\d+)$")
TMP_PREFIX = ".tmp-"
TEST_DELAY_ENV = "MUA_TEST_CHECKPOINT_DELAY_S"  # test-only, see the module docstring


def checkpoints_dir(run_dir: str | Path) -> Path:
    return Path(run_dir) / "checkpoints"


def list_checkpoints(run_dir: str | Path) -> list[tuple[int, Path]]:
    root = checkpoints_dir(run_dir)
    if not root.is_dir():
        return []
    found = []
    for p in root.iterdir():
        m = _STEP_DIR.match(p.name)
        if m and p.is_dir() and (p / "trainer_state.pt").exists():
            found.append((int(m.group(1)), p))
    return sorted(found)


def latest_checkpoint(run_dir: str | Path) -> Path | None:
    found = list_checkpoints(run_dir)
    return found[-1][1] if found else None


def remove_partial(run_dir: str | Path) -> None:
    """Delete what killed writes left: `checkpoints/.tmp-*` and the temporary folders of HF
    exports under `hf/` (`.tmp-<name>`, and the writer's own hidden `.<name>.tmp-<pid>`)."""
    root = checkpoints_dir(run_dir)
    if root.is_dir():
        for p in root.iterdir():
            if p.name.startswith(TMP_PREFIX):
                shutil.rmtree(p, ignore_errors=True)
    exports = Path(run_dir) / "hf"
    if exports.is_dir():
        for p in exports.iterdir():
            if p.is_dir() and p.name.startswith(".") and TMP_PREFIX in p.name:
                shutil.rmtree(p, ignore_errors=True)


def _rng_state() -> dict:
    state = {"torch": torch.get_rng_state(), "python": random.getstate()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _test_only_delay() -> None:
    """Hold a finished-but-not-renamed write for `MUA_TEST_CHECKPOINT_DELAY_S` seconds (tests only)."""
    delay_s = float(os.environ.get(TEST_DELAY_ENV, "0") or 0)
    if delay_s > 0:
        time.sleep(delay_s)


def save_checkpoint(
    run_dir,
    step: int,
    *,
    model,
    optimizer,
    trainer_state: dict,
    rank: int,
    keep_last: int,
    hf_files=None,
    critic=None,
    critic_optimizer=None,
) -> Path:
    """Write checkpoint `step` on every rank (collective), rename it into place on rank 0.

    `hf_files(dir)` is called on rank 0 to save config.json and the tokenizer beside the tensors.
    """
    root = checkpoints_dir(run_dir)
    final = root / f"global_step_{step}"
    tmp = root / f"{TMP_PREFIX}global_step_{step}"
    if rank == 0:
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
    barrier()
    save_dcp(tmp, model, optimizer, ignore_frozen=_is_peft(model))
    if critic is not None:
        save_dcp(tmp / "critic", critic, critic_optimizer)
    (tmp / "rng").mkdir(exist_ok=True)
    torch.save(_rng_state(), tmp / "rng" / f"rank_{rank}.pt")
    if rank == 0:
        torch.save({**trainer_state, "step": step}, tmp / "trainer_state.pt")
        if hf_files is not None:
            hf_files(tmp)
    _test_only_delay()
    barrier()
    if rank == 0:
        write_checksums(tmp)
        if final.exists():
            shutil.rmtree(final)
        tmp.rename(final)
        for _, old in list_checkpoints(run_dir)[:-keep_last]:
            shutil.rmtree(old, ignore_errors=True)
    barrier()
    return final


def _is_peft(model) -> bool:
    from mua.models.lora import is_peft

    return is_peft(model)


def damaged_message(run_dir: str | Path, path: Path, problem: str) -> str:
    """One line: the damaged checkpoint, what is wrong, and how to resume from an earlier one."""
    match = _STEP_DIR.match(path.name)
    step = int(match.group(1)) if match else 0
    earlier = [p for s, p in list_checkpoints(run_dir) if s < step]
    good = next((p for p in reversed(earlier) if checkpoint_problem(p) is None), None)
    hint = (
        f"resume from the previous complete one with `mua train ... --resume-from {good.name}`"
        if good is not None
        else "no earlier complete checkpoint is left"
    )
    return f"checkpoint {path} is damaged: {problem}; {hint}, or start over with --no-resume"


def load_checkpoint(
    path: str | Path, *, model, optimizer, rank: int, critic=None, critic_optimizer=None
) -> dict:
    """Load tensors into the (already sharded) model/optimizer; return the trainer state."""
    path = Path(path)
    load_dcp(path, model, optimizer, ignore_frozen=_is_peft(model))
    if critic is not None:
        load_dcp(path / "critic", critic, critic_optimizer)
    state = load_plain(path / "trainer_state.pt")
    rng_file = path / "rng" / f"rank_{rank}.pt"
    if rng_file.exists():
        _set_rng_state(load_plain(rng_file))
    return state


def load_plain(file: Path):
    """A `torch.save`d file of plain data (dicts, lists, tuples, numbers, strings, tensors) read
    with `weights_only=True`: a file holding any other object is refused, never unpickled."""
    import pickle

    try:
        return torch.load(file, weights_only=True)
    except pickle.UnpicklingError:
        from mua.errors import RunFailure

        raise RunFailure(
            f"{file} holds more than plain data (a pickled object mua never writes); refusing "
            "to load it, since loading could run code: resume only from checkpoints of your runs"
        ) from None
