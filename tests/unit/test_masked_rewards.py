"""Masked trajectories (a failure of the user, gym or engine) are not rewards of 0: reward means
leave them out and count them beside; a step or gym with nothing scored logs no reward at all."""

from __future__ import annotations

from types import SimpleNamespace

from mua.track.console import gym_split
from mua.train.rl_batch import BatchReport
from mua.train.rl_metrics import rollout_metrics


def _traj(gym: str, reward: float, termination: str):
    return SimpleNamespace(
        reward=reward,
        num_turns=2,
        token_ids=[1, 2, 3],
        metrics={},
        termination=termination,
        gym=gym,
    )


def _metrics(trajs, labels=None):
    return rollout_metrics(trajs, [], BatchReport(), [0.0] * len(trajs), None, labels=labels)


def test_masked_trajectories_leave_reward_means():
    trajs = [
        _traj("a", 1.0, "done"),
        _traj("a", 0.0, "done"),
        _traj("b", 0.0, "user_failure"),
        _traj("b", 0.0, "user_failure"),
    ]
    m = _metrics(trajs, labels=["a", "b"])
    assert m["reward/mean"] == 0.5
    assert m["reward/success_rate"] == 0.5
    assert m["reward/scored"] == 2.0 and m["reward/masked"] == 2.0
    assert m["train/a/reward"] == 0.5 and m["train/a/masked"] == 0.0
    # the gym whose user died has nothing scored: no reward, its masked count beside
    assert "train/b/reward" not in m and "train/b/success" not in m
    assert m["train/b/masked"] == 2.0 and m["train/b/user_failures"] == 2.0
    assert m["train/b/share"] == 0.5
    split = gym_split(m)
    assert "a 0.5" in split and "b masked 2" in split


def test_step_with_nothing_scored_logs_no_reward():
    m = _metrics([_traj("", 0.0, "user_failure"), _traj("", 0.0, "timeout")])
    assert "reward/mean" not in m and "reward/success_rate" not in m
    assert m["reward/scored"] == 0.0 and m["reward/masked"] == 2.0
    assert m["termination/user_failure"] == 1.0


def test_truncation_is_scored():
    m = _metrics([_traj("", 0.0, "max_turns"), _traj("", 1.0, "done")])
    assert m["reward/mean"] == 0.5 and m["reward/masked"] == 0.0


def test_reward_components_are_averaged_over_the_scored_trajectories_carrying_them():
    with_parts = _traj("", 0.75, "done")
    with_parts.reward_components = {"fidelity": 1.0, "judge": 0.5}
    other = _traj("", 0.25, "done")
    other.reward_components = {"fidelity": 0.0, "judge": 0.5}
    masked = _traj("", 0.0, "user_failure")
    masked.reward_components = {"fidelity": 1.0}
    m = _metrics([with_parts, other, masked, _traj("", 0.0, "done")])
    assert m["reward/component/fidelity"] == 0.5  # the masked one is left out
    assert m["reward/component/judge"] == 0.5
