"""Benchmarks fail when they time no work: B1's mua step runs its own one-turn gym (so it
generates and trains), and a step that generated or trained nothing, or did other work than the
other side, stops the benchmark instead of reporting a ratio."""

from __future__ import annotations

import pytest

from bench.common import NoWorkTimed, require_same_work, require_work


def test_require_work_and_same_work():
    require_work("BX", "a step", trajectories=32, trained_tokens=5)
    with pytest.raises(NoWorkTimed, match="trained_tokens=0"):
        require_work("BX", "a step", trajectories=32, trained_tokens=0)
    require_same_work("BX", "rows", a=3, b=3)
    with pytest.raises(NoWorkTimed, match="a 3, b 4"):
        require_same_work("BX", "rows", a=3, b=4)


@pytest.mark.timeout(300)
def test_b1_mua_step_generates_and_trains_on_its_gym(tmp_path):
    import torch

    from bench import b1_grpo_vs_trl as b1
    from bench._proc_group import one_process_group

    torch.set_num_threads(1)
    with one_process_group() as dist:
        trainer = b1.mua_trainer(b1.MODELS["1m"], tmp_path, dist)
        metrics = b1.mua_step(trainer, 1)
        trainer.tracker.close("FINISHED")
    b1.check_mua_step(metrics, 0)  # raises NoWorkTimed on a step that did nothing
    assert metrics["tokens/trained"] > 0
    assert sum(v for k, v in metrics.items() if k.startswith("termination/")) == b1.WORK
    with pytest.raises(NoWorkTimed):
        b1.check_mua_step({**metrics, "tokens/trained": 0.0}, 0)
    with pytest.raises(NoWorkTimed):
        b1.check_trl_step({"step_s": 1.0, "completions": 0.0, "completion_tokens": 0.0}, 0)


def test_b7_fails_when_the_training_step_left_the_weights_as_they_were():
    from types import SimpleNamespace

    from bench.b7_logprob_agreement import variant_metrics

    sampled = [SimpleNamespace(token_ids=[1, 2, 3])]
    ok = variant_metrics((0.0, 0.0), (0.2, 0.5), (0.0, 0.0), sampled, "_x")
    assert ok["sampled_tokens_x"] == 3.0
    with pytest.raises(NoWorkTimed, match="stale_engine_logp_diff=0"):
        variant_metrics((0.0, 0.0), (0.0, 0.0), (0.0, 0.0), sampled, "_x")
    with pytest.raises(NoWorkTimed, match="sampled_tokens=0"):
        variant_metrics((0.0, 0.0), (0.2, 0.5), (0.0, 0.0), [], "_x")


def test_nonzero_grads_counts_what_a_backward_left():
    import torch

    from bench.common import nonzero_grads

    model = torch.nn.Linear(2, 1, bias=False)
    assert nonzero_grads(model) == 0
    model(torch.ones(1, 2)).sum().backward()
    assert nonzero_grads(model) == 2


def test_worker_results_runs_each_mode_in_a_process_of_its_own(tmp_path, capsys):
    from bench.common import worker_results

    # `python -m json.tool FILE` prints the JSON value FILE holds: each mode is one file here
    one, two = tmp_path / "one.json", tmp_path / "two.json"
    one.write_text("1")
    two.write_text("{}")
    assert worker_results("BX", "json.tool", str(one), str(two), timeout_s=60) == [1, {}]
    assert capsys.readouterr().out == f"  {one}: 1\n  {two}: {{}}\n"
    with pytest.raises(RuntimeError, match="BX .*missing.json worker failed"):
        worker_results("BX", "json.tool", str(tmp_path / "missing.json"), timeout_s=60)
