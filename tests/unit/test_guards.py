"""Training stops: non-finite loss or gradient, runs that learn nothing (said every step, stopped
after `stop.empty_steps`), a high env_error rate; the torchrun wrapper's exit codes."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

from mua.config.train import StopConfig
from mua.train.guards import RunStopped, StepWatch, check_finite, empty_step_reasons


def _metrics(**counts):
    base = {"filter/samples_trained": 0.0, "filter/samples_with_signal": 0.0}
    base.update({k.replace("__", "/"): float(v) for k, v in counts.items()})
    return base


def test_non_finite_loss_or_gradient_stops():
    check_finite(0.5, 0.2)
    for loss, norm in [(math.nan, 0.2), (0.5, math.inf), (0.5, math.nan)]:
        with pytest.raises(RunStopped, match="the policy loss or gradient is not finite"):
            check_finite(loss, norm)
    assert RunStopped.exit_code == 1 and RunStopped.on_every_rank


def test_reasons_name_exclusions_and_zero_advantage():
    excluded = _metrics(
        **{
            "termination__length": 60,
            "termination__done": 4,
            "filter__excluded_by_termination": 60,
            "filter__samples_trained": 4,
        }
    )
    text = empty_step_reasons(excluded)
    assert "60 of 64 trajectories excluded (length 60)" in text
    assert "the 4 kept samples all have zero advantage" in text
    assert empty_step_reasons({**excluded, "filter/samples_with_signal": 1.0}) is None


def test_empty_steps_are_said_every_step_and_stop_the_run(capsys):
    watch = StepWatch(StopConfig(empty_steps=3), show=True)
    empty = _metrics(**{"termination__max_turns": 8, "filter__excluded_by_termination": 8})
    useful = {**empty, "filter/samples_with_signal": 2.0}
    watch.after_step(1, empty)
    watch.after_step(2, empty)
    watch.after_step(3, useful)  # the count starts over
    watch.after_step(4, empty)
    watch.after_step(5, empty)
    lines = capsys.readouterr().out.splitlines()
    assert lines == [
        f"step {s}: nothing to learn from: 8 of 8 trajectories excluded (max_turns 8)"
        for s in (1, 2, 4, 5)
    ]
    with pytest.raises(RunStopped, match="stopped after 3 steps in a row with nothing to learn"):
        watch.after_step(6, empty)
    never = StepWatch(StopConfig(empty_steps=0), show=False)
    for step in range(10):
        never.after_step(step, empty)


def test_a_high_env_error_rate_stops_the_run():
    watch = StepWatch(StopConfig(env_error_rate=0.5), show=False)
    ok = {
        **_metrics(**{"termination__done": 5, "termination__env_error": 3}),
        "filter/samples_with_signal": 1.0,
    }
    watch.after_step(1, ok)
    bad = {
        **_metrics(**{"termination__done": 3, "termination__env_error": 5}),
        "filter/samples_with_signal": 1.0,
    }
    with pytest.raises(RunStopped, match="5 of 8 trajectories ended in env_error"):
        watch.after_step(2, bad)
    StepWatch(StopConfig(env_error_rate=1.0), show=False).after_step(2, bad)


def test_torchrun_wrapper_returns_the_ranks_code_and_names_a_killed_rank(capsys):
    from mua.train.torchrun import _failure_code

    failed = {0: SimpleNamespace(exitcode=-15), 1: SimpleNamespace(exitcode=2)}
    assert _failure_code(failed) == 2
    assert _failure_code({1: SimpleNamespace(exitcode=-9)}) == 1
    assert capsys.readouterr().err.strip() == "error: rank 1 was killed by SIGKILL"
