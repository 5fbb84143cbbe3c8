"""Adding an engine is a folder plus one registry line: a GRPO step through `mua train` (torchrun,
CPU) with `rollout.engine: toy`, an engine defined in the test suite (`tests/integration/toy_engine`)
and registered through the `MUA_ENGINES` environment variable. The toy engine's own log shows it
was built by the registry, pushed the initial and the updated weights, and sampled every rollout;
its log-probs agree with the trainer's, so the step trained on what it sampled."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.integration.grpo_helpers import MODEL, write_guess_tasks, write_rl_recipe
from tests.integration.train_helpers import REPO, metric_history, run_train

pytestmark = pytest.mark.integration


def _events(log: Path) -> list[dict]:
    return [json.loads(line) for line in log.read_text().splitlines()]


def test_an_engine_registered_from_the_test_suite_trains_a_step(tmp_path):
    train, _ = write_guess_tasks(tmp_path, num_train=8, num_test=0)
    recipe = write_rl_recipe(tmp_path, Path(MODEL), train, rollout={"engine": "toy"}, total_steps=1)
    log = tmp_path / "toy.jsonl"
    env = {
        "MUA_ENGINES": "toy=tests.integration.toy_engine:build",
        "TOY_ENGINE_LOG": str(log),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
    }
    res = run_train(recipe, env_extra=env)
    assert res.returncode == 0, res.stderr[-3000:]

    events = _events(Path(f"{log}.0"))
    names = [e["event"] for e in events]
    assert names[0] == "build" and events[0]["engine"] == "toy"
    pushes = [e for e in events if e["event"] == "push"]
    # the initial weights before the rollouts, the updated ones right after the step's update
    assert [p["version"] for p in pushes] == ["0", "1"] and all(p["tensors"] for p in pushes)
    first_generate = names.index("generate")
    assert names.index("begin") < names.index("push") < first_generate < names.index("end")
    assert names.count("generate") >= 4 * 4  # tasks_per_step × n conversations, one turn at least
    assert names[-1] == "close"
    assert len(metric_history(tmp_path / "run", "loss")) == 1
    assert max(metric_history(tmp_path / "run", "logp_diff_engine_vs_trainer")) < 1e-4


def test_an_unregistered_engine_is_refused_in_one_line(tmp_path):
    train, _ = write_guess_tasks(tmp_path, num_train=8, num_test=0)
    recipe = write_rl_recipe(tmp_path, Path(MODEL), train, rollout={"engine": "toy"}, total_steps=1)
    res = run_train(recipe)
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert res.returncode == 2 and len(lines) == 1, res.stderr[-2000:]
    assert "unknown engine 'toy'" in lines[0]
