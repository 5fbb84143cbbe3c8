"""`mua train` (torchrun, CPU, tiny model) through the training gateway: two GRPO steps of the
example agent program, written with the `openai` SDK only, on guess tasks, as two `gyms:`
entries: the agent as it is, and the same agent trimming its history each turn. The step trains
exactly the tokens the engine sampled for the programs (`tokens/trained` equals the sessions'
`gateway/sampled_tokens`, the trainer's log-probs agree with the engine's), and the trimmed
sessions' splits are counted and shown by `mua view`."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.grpo_helpers import write_guess_tasks
from tests.integration.train_helpers import (
    REPO,
    check_gateway_tokens_trained,
    metric_history,
    program_grpo_recipe,
    train_recipe,
)

pytestmark = pytest.mark.integration

AGENT = "python examples/gateway_agents/guess_agent.py"


def test_an_openai_sdk_agent_trains_through_the_gateway(tmp_path):
    plain, _ = write_guess_tasks(tmp_path / "plain", num_train=8, num_test=0)
    trim, _ = write_guess_tasks(tmp_path / "trim", num_train=8, num_test=0)
    program = {"command": AGENT, "timeout_s": 120, "env": {"GUESS_AGENT_ROUNDS": "3"}}
    gyms = [
        {"name": "guess", "label": "agent", "train_files": [str(plain)], "program": program},
        {
            "name": "guess",
            "label": "trimming_agent",
            "train_files": [str(trim)],
            "program": {**program, "env": {"GUESS_AGENT_ROUNDS": "3", "GUESS_AGENT_TRIM": "1"}},
        },
    ]
    budgets = {"max_new_tokens_per_turn": 16, "max_total_tokens": 1024, "max_turns": 3}
    recipe = program_grpo_recipe(
        tmp_path, gyms, {"tasks_per_step": 2}, budgets, track={"transcripts_per_step": 8}
    )
    run = train_recipe(tmp_path, recipe, "gateway")
    requests = metric_history(run, "gateway/requests")
    assert requests and all(r >= 4 for r in requests)  # every program asked the model
    assert max(metric_history(run, "gateway/splits")) > 0  # the trimming agent split
    check_gateway_tokens_trained(run)
    assert max(metric_history(run, "logp_diff_engine_vs_trainer")) < 1e-4
    assert (
        not metric_history(run, "reward/masked") or max(metric_history(run, "reward/masked")) == 0
    )

    view = subprocess.run(
        [sys.executable, "-m", "mua.cli.main", "view", str(run)],
        capture_output=True, text=True, cwd=REPO, timeout=300,
    )  # fmt: skip
    assert view.returncode == 0, view.stderr[-2000:]
    page = (run / "view.html").read_text()
    assert "gateway/splits" in page and "gateway splits (" in page
    assert "a new sample starts here (split)" in page
    assert Path(run / "recipe.resolved.yaml").exists()
