"""Asynchronous RL through `mua train` on CPU: switched off it is today's run, bit for bit;
switched on, every step trains its share of groups, carries the rest and logs the `async/...`
metrics and the correction's statistics."""

from __future__ import annotations

import pytest

from tests.integration.grpo_helpers import write_rl_recipe
from tests.integration.train_helpers import final_params, metric_history, run_train

pytestmark = pytest.mark.integration

GRPO = {"kind": "grpo", "score": "sum", "gamma": 1.0}
OFF = {"rollout": {"oversample": 1.0}, "algo": {**GRPO, "max_staleness": 0, "correction": "none"}}
ON = {"rollout": {"oversample": 1.5}, "algo": {**GRPO, "max_staleness": 2, "correction": "tis"}}


def train(guess_setup, folder, **extra):
    model, train_file, test = guess_setup
    folder.mkdir()
    recipe = write_rl_recipe(folder, model, train_file, test, total_steps=2, **extra)
    res = run_train(recipe)
    assert res.returncode == 0, res.stderr[-3000:]
    return folder / "run"


def test_switched_off_is_bit_identical_to_the_synchronous_run(guess_setup, tmp_path):
    plain = train(guess_setup, tmp_path / "plain")
    off = train(guess_setup, tmp_path / "off", **OFF)
    a, b = final_params(plain), final_params(off)
    assert a.keys() == b.keys()
    assert all(a[k].equal(b[k]) for k in a)
    for key in ("loss", "reward/mean", "grad_norm", "actor/pg_loss", "tokens/total"):
        assert metric_history(plain, key) == metric_history(off, key), key
    assert metric_history(off, "async/groups_carried") == []  # the synchronous path ran


@pytest.mark.slow
def test_switched_on_trains_each_steps_share_and_carries_the_rest(guess_setup, tmp_path):
    run = train(guess_setup, tmp_path / "on", **ON)
    assert metric_history(run, "filter/samples_trained") == [16.0, 16.0]  # 4 groups of 4
    assert metric_history(run, "async/groups_started")[0] == 6.0  # ceil(1.5 × 4)
    assert all(c >= 1 for c in metric_history(run, "async/groups_carried"))
    assert max(metric_history(run, "async/staleness_max")) <= 2
    assert all(0.0 <= f < 1.0 for f in metric_history(run, "engine/idle_frac"))
    weights = metric_history(run, "actor/is_weight_mean")
    assert len(weights) == 2 and all(0 < w <= 2.0 for w in weights)


@pytest.mark.slow
def test_a_resumed_run_restarts_the_groups_in_flight_at_its_checkpoint(guess_setup, tmp_path):
    """Stop after step 2 (its checkpoint records the groups in flight), resume up to step 3:
    step 3 starts exactly those groups' tasks again before drawing new ones."""
    run = train(guess_setup, tmp_path / "resumed", **ON)
    carried = metric_history(run, "async/groups_carried")
    assert carried[-1] >= 1
    assert metric_history(run, "async/unfinished_at_end") == [carried[-1]]
    res = run_train(tmp_path / "resumed" / "rl.yaml", "total_steps=3")
    assert res.returncode == 0, res.stderr[-3000:]
    assert "resumed from" in res.stdout
    restarted = metric_history(run, "async/restarted_groups")
    assert restarted == [0.0, 0.0, carried[-1]]
    assert metric_history(run, "filter/samples_trained")[-1] == 16.0


@pytest.mark.slow
def test_two_gyms_with_partial_rollouts(guess_setup, tmp_path):
    """Two `gyms:` entries with different group sizes (4 and 2) and turn limits, oversampled:
    every step trains its 4 groups, whichever gyms they come from, and carries the rest."""
    import yaml

    from tests.integration.test_train_multi_gym import _guess6_tasks, _recipe

    six = _guess6_tasks(tmp_path / "six")
    recipe = _recipe(tmp_path, guess_setup, six)
    raw = yaml.safe_load(recipe.read_text())
    raw["gyms"][0].pop("curriculum")
    raw["rollout"].update(ON["rollout"])
    raw["algo"].update(ON["algo"])
    raw["total_steps"] = 2
    recipe.write_text(yaml.safe_dump(raw))
    res = run_train(recipe)
    assert res.returncode == 0, res.stderr[-3000:]
    run = tmp_path / "run"
    small = metric_history(run, "train/small/share")
    wide = metric_history(run, "train/wide/share")
    assert len(small) == 2 and all(abs(a + b - 1.0) < 1e-9 for a, b in zip(small, wide))
    trained = metric_history(run, "filter/samples_trained")
    assert all(8 <= t <= 16 for t in trained)  # 4 groups of 2 or 4 samples
    assert metric_history(run, "async/groups_started")[0] == 6.0
    assert (
        metric_history(run, "async/unfinished_at_end")
        == metric_history(run, "async/groups_carried")[-1:]
    )
    assert max(metric_history(run, "train/wide/turns")) <= 3  # each gym keeps its own limits
    assert max(metric_history(run, "train/small/turns")) <= 2


@pytest.mark.slow
def test_partial_rollouts_against_mua_serve(guess_setup, tmp_path):
    """`rollout.engine: sglang` against `mua serve` (SGLang's protocol on CPU): the carried
    conversations resume on the server after each weight push, and the probe agrees."""
    from mua.engines.hf.hf_engine import HFEngine
    from mua.serve import MuaServer

    model, train_file, test = guess_setup
    folder = tmp_path / "served"
    folder.mkdir()
    recipe = write_rl_recipe(
        folder, model, train_file, test, total_steps=2,
        rollout={**ON["rollout"], "engine": "sglang"}, algo=ON["algo"],
    )  # fmt: skip
    with MuaServer(HFEngine.from_pretrained(str(model), seed=0), model_path=str(model)) as server:
        res = run_train(recipe, f"rollout.sglang.base_urls=[{server.url}]")
        pushes = server.counts["weight_requests"]
    assert res.returncode == 0, res.stderr[-3000:]
    run = folder / "run"
    assert pushes >= 2  # one before each step's rollouts
    assert metric_history(run, "filter/samples_trained") == [16.0, 16.0]
    assert metric_history(run, "async/groups_started")[0] == 6.0
    assert max(metric_history(run, "async/groups_resumed")) >= 1  # carried, then trained
    assert max(metric_history(run, "engine/probe_logp_diff")) < 0.05
