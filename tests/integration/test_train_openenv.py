"""`mua prep`, `mua train` (two GRPO steps) and `mua eval` of one `gyms:` entry that is an OpenEnv
environment (tests/gyms/openenv_guess_server.py, openenv 0.10.0) reached through OpenEnv's own
client in its side venv (`make openenv-side`); and kill -9 of `mua train` leaves no client."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.gyms import test_openenv_env
from tests.gyms.test_openenv_env import SIDE_PYTHON
from tests.integration.byo_helpers import gone_within, kill_9_while, train_and_eval, write_recipe

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        not SIDE_PYTHON.exists(), reason="needs the OpenEnv side venv: make openenv-side"
    ),
]


server = test_openenv_env.server  # the same module-scoped OpenEnv server fixture


def options(url: str) -> dict:
    return {"url": url, "python": str(SIDE_PYTHON), "observation_field": "feedback"}


def test_train_and_eval_with_an_openenv_environment(tmp_path, server):
    summary = train_and_eval(tmp_path, "openenv", options(server))
    assert summary["components"] == {"reward": summary["reward_mean"]}


def _bridge_of(url: str):
    """The pid of the OpenEnv client process talking to `url`, if one runs."""
    for proc in Path("/proc").iterdir():
        try:
            cmdline = (proc / "cmdline").read_bytes().split(b"\0")
        except (FileNotFoundError, PermissionError, NotADirectoryError, ProcessLookupError):
            continue
        if url.encode() in cmdline and any(a.endswith(b"bridge.py") for a in cmdline):
            if int(proc.name) != os.getpid():
                return int(proc.name)
    return None


def test_kill_9_of_mua_train_leaves_no_openenv_client(tmp_path, server):
    recipe = write_recipe(tmp_path, "openenv", options(server), steps=200)
    pid = kill_9_while(recipe, lambda: _bridge_of(server))
    assert gone_within(pid), "the OpenEnv client outlived kill -9 of mua train"
