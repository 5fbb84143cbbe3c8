"""`mua prep`, `mua train` (two GRPO steps) and `mua eval` of one `gyms:` entry that is a
verifiers 0.4.0 environment (tests/gyms/verifiers_guess_env: its taskset, its Env answering
higher or lower, its task reward) run in the side venv (`make verifiers-side`); and kill -9 of
`mua train` leaves no bridge."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.gyms.test_verifiers_env import PROMPT, SIDE_PYTHON
from tests.integration.byo_helpers import gone_within, kill_9_while, recipe_for, train_then_eval

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        not SIDE_PYTHON.exists(), reason="needs the verifiers side venv: make verifiers-side"
    ),
]
REPO = Path(__file__).resolve().parents[2]
OPTIONS = {
    "env": "vf-guess",
    "python": str(SIDE_PYTHON),
    "env_args": {"taskset": {"num_tasks": 12}, "max_guesses": 2},
}


def prep(folder: Path) -> tuple[Path, Path]:
    """`mua prep --gym verifiers` of the environment's 12 rows, the last 4 the test split."""
    out = folder / "data"
    res = subprocess.run(
        [sys.executable, "-m", "mua.cli.main", "prep", "--gym", "verifiers", "--out", str(out),
         "--option", "env=vf-guess", "--option", f"python={SIDE_PYTHON}",
         "--option", "env_args={taskset: {num_tasks: 12}, max_guesses: 2}",
         "--option", "test_rows=4"],
        capture_output=True, text=True, cwd=REPO, timeout=300,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-2000:]
    assert "train │ 8" in res.stdout and "test  │ 4" in res.stdout, res.stdout
    return out / "train.parquet", out / "test.parquet"


def test_prep_train_and_eval_with_a_verifiers_environment(tmp_path):
    recipe = recipe_for(tmp_path, "verifiers", OPTIONS, prep(tmp_path))
    summary = train_then_eval(tmp_path, recipe, PROMPT)
    assert set(summary["components"]) == {"correct"}
    assert summary["components"]["correct"] == summary["reward_mean"]


def _bridge_running() -> int | None:
    """The pid of a verifiers bridge process of this test's environment, if one runs."""
    for proc in Path("/proc").iterdir():
        try:
            cmdline = (proc / "cmdline").read_bytes().split(b"\0")
        except (FileNotFoundError, PermissionError, NotADirectoryError, ProcessLookupError):
            continue
        if b"vf-guess" in cmdline and any(a.endswith(b"verifiers/bridge.py") for a in cmdline):
            if int(proc.name) != os.getpid() and cmdline[0] == str(SIDE_PYTHON).encode():
                return int(proc.name)
    return None


def test_kill_9_of_mua_train_leaves_no_verifiers_bridge(tmp_path):
    recipe = recipe_for(tmp_path, "verifiers", OPTIONS, prep(tmp_path), steps=200)
    pid = kill_9_while(recipe, _bridge_running)
    assert gone_within(pid), "the verifiers bridge outlived kill -9 of mua train"
