"""Helpers of the bring-your-own-environment training tests (mcp, openenv, verifiers): guess tasks written as
JSONL and prepped with `mua prep --gym NAME --source`, a two-step GRPO recipe around one gym
entry, `mua train` then `mua eval` of it, and kill -9 of `mua train` with a process it started."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import yaml

from tests.integration.train_helpers import REPO, metric_history, run_train

SYSTEM = "Guess my number from 1 to 4. Reply [answer] N. I say higher or lower."


async def play_actions(env, task, actions) -> tuple:
    """(reset, the steps) of `env` playing `task` with `actions`, up to the step that ends it."""
    reset = await env.reset(task)
    steps = []
    for action in actions:
        steps.append(await env.step(action))
        if steps[-1].done:
            break
    return reset, steps


def alive(pid: int) -> bool:
    """Running (a zombie left to a parent that does not reap it counts as gone)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def prep_tasks(folder: Path, gym: str) -> tuple[Path, Path]:
    """`mua prep --gym GYM` of a JSONL of guess games (1..4), 8 train and 4 test tasks."""
    source = folder / "tasks.jsonl"
    rows = [
        {"system": SYSTEM, "prompt": "Your guess?", "payload": {"target": 1 + i % 4},
         "split": "train" if i < 8 else "test"}
        for i in range(12)
    ]  # fmt: skip
    source.write_text("".join(json.dumps(r) + "\n" for r in rows))
    res = subprocess.run(
        [sys.executable, "-m", "mua.cli.main", "prep", "--gym", gym, "--source", str(source),
         "--out", str(folder / "data")],
        capture_output=True, text=True, cwd=REPO, timeout=300,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-2000:]
    return folder / "data" / "train.parquet", folder / "data" / "test.parquet"


def write_recipe(folder: Path, gym: str, options: dict, steps: int = 2) -> Path:
    train, test = prep_tasks(folder, gym)
    return recipe_for(folder, gym, options, (train, test), steps)


def recipe_for(folder: Path, gym: str, options: dict, files: tuple, steps: int = 2) -> Path:
    """A `steps`-step GRPO recipe of one `gyms:` entry with the (train, test) task files."""
    train, test = files
    entry = {"name": gym, "train_files": [str(train)], "test_files": [str(test)]}
    recipe = {
        "model": {"path": "tiny:qwen2-1m", "tool_parser": "bracket"},
        "gyms": [{**entry, "options": options}],
        "data": {"tasks_per_step": 2},
        "rollout": {"n": 2, "max_new_tokens_per_turn": 8, "max_total_tokens": 512, "max_turns": 2},
        "algo": {"kind": "grpo", "score": "sum"},
        "optim": {"lr": 1e-3},
        "checkpoint": {"save_freq": 0},
        "track": {"transcripts_per_step": 4},
        "total_steps": steps,
        "run_dir": str(folder / "run"),
    }
    path = folder / f"{gym}.yaml"
    path.write_text(yaml.safe_dump(recipe))
    return path


def train_and_eval(folder: Path, gym: str, options: dict) -> dict:
    """Two GRPO steps then `mua eval` of the export; returns the eval summary of the gym."""
    return train_then_eval(folder, write_recipe(folder, gym, options), SYSTEM)


def train_then_eval(folder: Path, recipe: Path, first_message: str) -> dict:
    """`mua train RECIPE` (two steps, whose transcripts open with `first_message`), then
    `mua eval` of its export on the test files (4 tasks x 2); returns the eval summary."""
    res = run_train(recipe, timeout_s=600)
    assert res.returncode == 0, res.stderr[-3000:]
    run = folder / "run"
    assert len(metric_history(run, "loss")) == 2
    rows = [json.loads(line) for line in (run / "transcripts" / "step_000001.jsonl").open()]
    assert rows and all(r["termination"] in ("done", "max_turns") for r in rows), rows
    assert rows[0]["messages"][0]["content"] == first_message
    train = yaml.safe_load(recipe.read_text())
    evaluation = {
        "verb": "eval",
        "model": {**train["model"], "path": str(run / "hf" / "final")},
        "gyms": train["gyms"],
        "rollout": train["rollout"],
        "eval": {"n": 2},
    }
    (folder / "eval.yaml").write_text(yaml.safe_dump(evaluation))
    res = subprocess.run(
        [sys.executable, "-m", "mua.cli.main", "eval", str(folder / "eval.yaml"), "--out",
         str(folder / "eval")],
        capture_output=True, text=True, cwd=REPO, timeout=600,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    (summary,) = json.loads((folder / "eval" / "summary.json").read_text())["gyms"].values()
    assert summary["num_trajectories"] == 8 and summary["excluded"] == 0, summary
    assert set(summary["terminations"]) <= {"done", "max_turns"}, summary
    return summary


def kill_9_while(recipe: Path, started) -> int:
    """Start `mua train RECIPE`, wait until `started()` gives the pid of a process the run
    started, kill -9 `mua train` alone (as a user would) and return that pid."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop("MLFLOW_TRACKING_URI", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "mua.cli.main", "train", str(recipe)], cwd=REPO, env=env,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 240
        while (pid := started()) is None:
            assert proc.poll() is None and time.monotonic() < deadline, "nothing started"
            time.sleep(0.2)
        assert alive(pid)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        return pid
    finally:
        if proc.poll() is None:
            proc.kill()


def gone_within(pid: int, seconds: float = 30) -> bool:
    deadline = time.monotonic() + seconds
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    return not alive(pid)
