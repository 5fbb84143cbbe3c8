"""Test-wide settings: offline mode, few threads, the `gpu` skip, shared-data and torchrun helpers,
and a user's command as typed (the installed `mua`, no PYTHONPATH, a fresh checkout)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MLFLOW_ENABLE_ASYNC_LOGGING", "false")
os.environ.pop("OPENAI_BASE_URL", None)
os.environ.pop("MLFLOW_TRACKING_URI", None)

REPO = Path(__file__).resolve().parents[1]


def load_script(name: str):
    """The module of `scripts/NAME.py`, imported from its file (scripts/ is not a package)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, REPO / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(autouse=True)
def _no_inherited_mlflow_uri(monkeypatch):
    """Every test starts without MLFLOW_TRACKING_URI: `mlflow.set_tracking_uri` exports it, so one
    test's store would otherwise receive the next test's runs."""
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def guess_setup(tmp_path_factory):
    """(warm model, train tasks, test tasks) of the guess gym, built once per session."""
    from tests.integration.grpo_helpers import shared_guess_setup

    return shared_guess_setup(tmp_path_factory)


def tau_expert_eval(out) -> list[str]:
    """`mua eval` arguments: tau's scripted expert on two tasks against an LLM user (whose
    endpoint the caller sets), results in `out`."""
    return [*"eval --gym tau --model expert --user llm --max-tasks 2".split(), "--out", str(out)]


def expert_rollouts(gym, tasks, tokenizer, rollout_cfg, ctx=None) -> list:
    """One trajectory per task by `gym`'s scripted expert (`run_rollouts_sync`), in `ctx`
    (a default `GymContext` when None)."""
    from mua.gym import GymContext
    from mua.rollout.collect import run_rollouts_sync
    from mua.rollout.policies import expert_policy

    ctx = GymContext() if ctx is None else ctx
    return run_rollouts_sync(
        tasks,
        n=1,
        policy=expert_policy(gym, ctx),
        gym_spec=gym,
        gym_ctx=ctx,
        tokenizer=tokenizer,
        rollout_cfg=rollout_cfg,
    )


SMALL_ROLLOUT = [
    "rollout.max_new_tokens_per_turn=16",
    "rollout.max_turns=3",
    "rollout.max_total_tokens=2048",
]


def tau_expert_evaluation(base_url: str, out_dir, overrides: list[str], track: bool) -> dict:
    """`tau_expert_eval` in this process (`run_evaluation`) against the LLM user at `base_url`,
    with small rollout budgets and the recipe `overrides`: the summaries by gym."""
    from mua.config import load_recipe
    from mua.eval.session import run_evaluation

    user = ["user.kind=llm", f"user.base_url={base_url}", "eval.max_tasks=2", *SMALL_ROLLOUT]
    recipe = load_recipe(None, [*user, *overrides], verb="eval")
    summaries, _ = run_evaluation(
        recipe, model="expert", gyms=["tau"], out_dir=out_dir, track=track
    )
    return summaries


def shared_dir() -> Path:
    return Path(os.environ.get("MUA_SHARED", REPO.parent / "shared"))


@pytest.fixture
def shared_data() -> Path:
    """`../shared/data`, or a skip saying why when it is absent."""
    data = shared_dir() / "data"
    if not data.is_dir():
        pytest.skip(f"public data not found at {data} (set MUA_SHARED to the shared/ folder)")
    return data


def pytest_collection_modifyitems(config, items):
    try:
        import torch

        has_cuda = torch.cuda.is_available()
    except Exception:
        has_cuda = False
    if not has_cuda:
        skip = pytest.mark.skip(reason="needs a CUDA GPU")
        for item in items:
            if "gpu" in item.keywords:
                item.add_marker(skip)


# What `mua` commands write in a checkout (and what a fresh one lacks): never linked into a copy.
WRITTEN = ("data", "runs", "build", "dist")


def installed_mua() -> str:
    """The installed `mua` executable next to this Python (`.venv/bin/mua`), the one a user types."""
    exe = Path(sys.executable).with_name("mua")
    if not exe.is_file():
        pytest.fail(f"no installed `mua` at {exe}: install the checkout first (`make setup`)")
    return str(exe)


def user_env(**extra: str) -> dict[str, str]:
    """This environment as a user's shell holds it: no PYTHONPATH (a documented command must not
    need the checkout on the path), no inherited MLflow store; wide columns, one thread."""
    env = {**os.environ, "COLUMNS": "200", "OMP_NUM_THREADS": "1", **extra}
    env.pop("PYTHONPATH", None)
    env.pop("MLFLOW_TRACKING_URI", None)
    return env


def fresh_checkout(folder: Path) -> Path:
    """`folder` laid out as a fresh checkout: a link to each top-level entry of the repository but
    hidden ones, build metadata and what commands write (`WRITTEN`); entries already there stay."""
    folder.mkdir(parents=True, exist_ok=True)
    for entry in REPO.iterdir():
        skipped = entry.name.startswith(".") or entry.name.endswith(".egg-info")
        target = folder / entry.name
        if not (skipped or entry.name in WRITTEN or target.exists() or target.is_symlink()):
            target.symlink_to(entry)
    return folder


@pytest.fixture
def mua_cli():
    """Run the installed `mua` from the checkout, as a user does: returns (exit_code, stdout,
    stderr)."""

    def run(*args: str):
        import subprocess

        res = subprocess.run(
            [installed_mua(), *args],
            capture_output=True,
            text=True,
            cwd=REPO,
            env=user_env(),
            timeout=600,
        )
        return res.returncode, res.stdout, res.stderr

    return run
