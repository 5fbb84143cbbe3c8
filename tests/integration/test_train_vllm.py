"""Two GRPO steps through `mua train` with `rollout.engine: vllm`: the rank launches a real vLLM
server (the 0.32.0 side venv, tests/.vllm) from `rollout.vllm.python`, pushes its weights after
each update and generates every rollout with it.

Checked: the run ends well; the probe after each use finds the engine's greedy log-probs equal to
the trainer's (the push is exact); the log-probs vLLM reported for every sampled token (at
temperature 1) equal the trainer's recomputation; the pushes were timed; the start-up note on
sleep/wake was printed once.
"""

from __future__ import annotations

import pytest

from tests.contract.vllm_side import side_python
from tests.integration.grpo_helpers import write_rl_recipe
from tests.integration.train_helpers import metric_history, run_train

pytestmark = pytest.mark.integration

STEPS = 2


def test_grpo_with_a_launched_vllm_server(guess_setup, tmp_path):
    from mua.engines.vllm.colocated import SLEEP_NOTE
    from tests.conftest import free_port

    python = side_python("0.32.0")
    model, train, test = guess_setup
    vllm = {"python": python, "port": free_port(), "extra_args": ["--max-model-len", "1024"]}
    recipe = write_rl_recipe(
        tmp_path, model, train, test, total_steps=STEPS, rollout={"engine": "vllm", "vllm": vllm}
    )
    res = run_train(recipe, timeout_s=600)
    assert res.returncode == 0, res.stderr[-3000:] + res.stdout[-2000:]
    run = tmp_path / "run"
    probe = metric_history(run, "engine/probe_logp_diff")
    assert len(probe) == STEPS and max(probe) < 1e-4, probe
    sampled = metric_history(run, "logp_diff_engine_vs_trainer")
    assert len(sampled) == STEPS and max(sampled) < 1e-4, sampled
    assert len(metric_history(run, "time/weight_push_s")) == STEPS
    assert (res.stdout + res.stderr).count(SLEEP_NOTE) == 1
