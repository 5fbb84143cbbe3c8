"""The gateway quickstart as a user types it: the installed `mua`, run from a fresh checkout, no
PYTHONPATH (`run_mua_in`). `recipes/gateway_quickstart.yaml` names its agent as a module of the
checkout (`examples.gateway_agents.guess_agent:play`), which `mua` finds in the folder it runs in.
Cut to one step of 2 tasks x 2 samples from a tiny random model (the recipe's warm start is a run
of its own); every program run reports a reward, none is masked."""

from __future__ import annotations

import pytest

from tests.integration.train_helpers import metric_history, run_mua_in

pytestmark = pytest.mark.integration

CUT = ["model.path=tiny:qwen2-1m", "total_steps=1", "data.tasks_per_step=2", "rollout.n=2"]


def test_the_gateway_quickstart_runs_from_a_fresh_checkout(tmp_path):
    run_mua_in(tmp_path, *"prep --gym guess --option max_number=8 --out data/guess".split())
    run_mua_in(tmp_path, "train", "recipes/gateway_quickstart.yaml", *CUT, timeout_s=300)
    run = tmp_path / "runs" / "gateway_quickstart"
    assert metric_history(run, "reward/scored") == [4.0]
    assert metric_history(run, "reward/masked") == [0.0]
