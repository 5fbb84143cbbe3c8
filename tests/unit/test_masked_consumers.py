"""Masked trajectories (their user, gym or engine failed) steer nothing: not the curriculum's
difficulty or the reward standardisation, not a GRPO group's baseline and std, not dynamic
sampling's zero-variance test. A group left with fewer than 2 valid members has no baseline: its
member gets advantage 0, and dynamic sampling drops it."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from mua.algo import group_advantages, zero_variance_groups
from mua.config.train import GRPOConfig
from mua.rollout.token_record import TokenRecord
from mua.rollout.trajectory import Trajectory
from mua.train.rl_batch import BatchReport, group_relative_advantages, keep_mask, score

torch.set_num_threads(1)


def _traj(group: str, reward: float, termination: str = "done", sample: int = 0):
    """A one-turn trajectory of task `group` ("position:task id") with two policy tokens."""
    return Trajectory(
        task_id=group.split(":", 1)[1],
        group_id=group,
        sample_index=sample,
        record=TokenRecord(
            token_ids=[1, 2, 3],
            loss_mask=[0, 1, 1],
            turn_index=[-1, 0, 0],
            logprobs=[0.0, -0.5, -0.5],
        ),
        reward=reward,
        turn_rewards=[reward],
        termination=termination,
    )


# ---- (a) the curriculum and reward standardisation -------------------------------------------


def test_curriculum_and_standardisation_see_only_scored_trajectories():
    from mua.config.gyms import CurriculumConfig
    from mua.train.mix_sampler import MixSampler
    from mua.train.rl import observe_step

    tasks = [SimpleNamespace(task_id=f"t{i}", gym="g") for i in range(3)]
    cur = CurriculumConfig(easy_above=0.9, hard_below=0.1, weight=0.0)
    sampler = MixSampler({"g": tasks}, {"g": 1.0}, seed=0, curricula={"g": cur}, standardize={"g"})
    recipe = SimpleNamespace(
        gyms=[SimpleNamespace(key="g", curriculum=cur, standardize_rewards=True)]
    )
    trajs = [
        _traj("0:t0", 1.0),
        _traj("0:t0", 1.0),
        _traj("0:t0", 0.0, "user_failure"),  # a dead user is not a hard task
        _traj("0:t0", 0.0, "env_error"),
        _traj("1:t1", 0.0, "timeout"),  # nothing scored: the task stays unseen
        _traj("1:t1", 0.0, "timeout"),
        _traj("2:t2", 0.0),
        _traj("2:t2", 0.0, "max_turns"),  # truncation is the policy's own doing: it counts
    ]
    metrics = observe_step(sampler, trajs, recipe)
    assert sampler.group_means["g"] == {"t0": 1.0, "t2": 0.0}
    assert sampler.pool_sizes("g") == {"easy": 1, "hard": 1, "seen": 2}
    assert sampler.reward_stats["g"][0] == 4.0  # rewards 1, 1, 0, 0: std sqrt(1/3)
    assert metrics["train/g/reward_scale"] == pytest.approx(3**0.5)


# ---- (b) group baselines -----------------------------------------------------------------------


def _advantages(trajs, **algo):
    cfg = GRPOConfig(**{"score": "sum", **algo})
    batch = score(trajs, cfg, rank=0, world_size=1, n=len(trajs))
    return group_relative_advantages(batch, cfg)


def test_masked_members_leave_the_group_baseline():
    # already so before: excluded trajectories never reached the baseline (pinned here)
    trajs = [_traj("0:a", 1.0), _traj("0:a", 1.0, sample=1), _traj("0:a", 0.0, "timeout", 2)]
    trajs.append(_traj("0:a", 0.0, sample=3))
    _, adv = _advantages(trajs, advantage="drgrpo")
    assert adv == pytest.approx([1 / 3, 1 / 3, -2 / 3])


def test_masked_trajectories_make_no_samples():
    # already so before (pinned): PPO's whitening and the update read only the samples
    trajs = [_traj("0:a", 1.0), _traj("0:a", 0.0, "env_error", 1), _traj("0:a", 0.0, sample=2)]
    batch = score(trajs, GRPOConfig(score="sum"), rank=0, world_size=1, n=3)
    assert [s.global_index for s in batch.samples] == [0, 2]


@pytest.mark.parametrize("kind", ["grpo", "drgrpo", "rloo", "reinforce++"])
def test_a_group_left_with_one_valid_member_gets_zero_advantage(kind):
    trajs = [
        _traj("0:a", 1.0),
        _traj("0:a", 0.0, "user_failure", 1),  # leaves its group with one member
        _traj("1:b", 1.0, sample=0),
        _traj("1:b", 0.0, sample=1),
    ]
    tokens, adv = _advantages(trajs, advantage=kind)
    others = {"grpo": 2**-0.5, "drgrpo": 0.5, "rloo": 1.0, "reinforce++": 2**-0.5}[kind]
    assert adv == pytest.approx([0.0, others, -others], abs=1e-5)
    assert tokens[0].tolist() == [0.0, 0.0, 0.0]


def test_turn_group_credit_gives_a_lone_valid_member_zero():
    trajs = [_traj("0:a", 1.0), _traj("0:a", 0.0, "env_error", 1)]
    trajs += [_traj("1:b", 1.0), _traj("1:b", 0.0, sample=1)]
    tokens, _ = _advantages(trajs, credit="turn-group")
    assert tokens[0].tolist() == [0.0, 0.0, 0.0]
    assert tokens[1][1:].tolist() == pytest.approx([2**-0.5] * 2, abs=1e-5)


def test_group_advantages_ignore_invalid_members():
    scores = [1.0, 0.0, 1.0, 0.0, 0.0, 5.0, 3.0]
    groups = ["a", "a", "a", "b", "b", "c", "d"]
    valid = [True, False, True, True, False, True, True]
    # a: 1 and 1 (the invalid 0 left out), b: one valid of two -> 0, c and d: groups of one
    assert group_advantages(scores, groups, "drgrpo", valid=valid).tolist() == [
        0.0, 0.0, 0.0, 0.0, 0.0, 5.0, 3.0
    ]  # fmt: skip
    # without `valid`, the formulas are unchanged
    assert group_advantages(scores[:3], groups[:3], "drgrpo").tolist() == pytest.approx(
        [1 / 3, -2 / 3, 1 / 3]
    )


# ---- (c) dynamic sampling ----------------------------------------------------------------------


def test_dynamic_sampling_tests_variance_over_valid_members_only():
    trajs = [
        _traj("0:a", 1.0),
        _traj("0:a", 1.0, sample=1),
        _traj("0:a", 0.0, "user_failure", 2),  # its only variance is a masked 0
        _traj("1:b", 1.0),
        _traj("1:b", 0.0, "timeout", 1),  # one valid member left
        _traj("2:c", 1.0),
        _traj("2:c", 0.0, sample=1),
        _traj("2:c", 0.0, "env_error", 2),
        _traj("3:d", 0.0, "user_failure"),  # wholly masked: excluded, not a dropped group
        _traj("3:d", 0.0, "user_failure", 1),
    ]
    report = BatchReport()
    keep = keep_mask(trajs, GRPOConfig(score="sum", dynamic_sampling=True), report)
    assert keep == [False] * 5 + [True, True] + [False] * 3
    assert report.excluded_by_termination == 5
    assert report.dropped_zero_variance_groups == 2
    assert report.dropped_zero_variance_trajectories == 3


def test_dynamic_sampling_follows_mask_truncated():
    trajs = [_traj("0:a", 1.0), _traj("0:a", 0.0, "max_turns", 1)]
    algo = GRPOConfig(score="sum", dynamic_sampling=True, mask_truncated=True)
    assert keep_mask(trajs, algo, BatchReport()) == [False, False]
    algo = GRPOConfig(score="sum", dynamic_sampling=True)
    assert keep_mask(trajs, algo, BatchReport()) == [True, True]


def test_zero_variance_groups_ignore_invalid_members():
    scores = [1.0, 1.0, 0.0, 1.0, 0.0, 0.0, 1.0]
    groups = ["a", "a", "a", "b", "b", "c", "c"]
    valid = [True, True, False, True, False, True, True]
    assert zero_variance_groups(scores, groups, valid=valid).tolist() == [
        True, True, True, True, True, False, False
    ]  # fmt: skip
