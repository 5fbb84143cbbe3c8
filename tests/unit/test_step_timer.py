"""StepTimer: phases nest and time is exclusive, so a push inside the rollout is push time only."""

import time

from mua.train.step_timer import StepTimer, timed


def test_nested_phase_time_counts_for_the_inner_phase_only():
    timer = StepTimer(always=("update",))
    with timer.phase("rollout"):
        time.sleep(0.05)
        with timer.phase("weight_push"):
            time.sleep(0.10)
        time.sleep(0.05)
    with timer.phase("weight_push"):
        time.sleep(0.02)
    m = timer.metrics()
    assert set(m) == {"time/rollout_s", "time/weight_push_s", "time/update_s"}
    assert m["time/update_s"] == 0.0  # always reported
    assert 0.12 <= m["time/weight_push_s"] < 0.2
    assert 0.1 <= m["time/rollout_s"] < 0.15  # not the 0.2 s the phase was open


def test_timed_without_a_timer_does_nothing():
    with timed(None, "weight_push"):
        pass
    timer = StepTimer()
    with timed(timer, "weight_push"):
        pass
    assert list(timer.metrics()) == ["time/weight_push_s"]
