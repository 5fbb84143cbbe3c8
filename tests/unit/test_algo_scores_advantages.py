"""Trajectory scores (§1) and group advantages (§2) against hand-computed values."""

from __future__ import annotations

import math
from functools import partial

import pytest
import torch

from mua.algo import group_advantages, trajectory_scores
from tests.unit.algo_asserts import assert_close

torch.set_num_threads(1)
EPS = 1e-6


close = partial(assert_close, tol=1e-4)


def test_worked_example_scores():
    rewards = [[0.0, 0.0, 1.0]]
    close(trajectory_scores(rewards, "sum"), [1.0])
    close(trajectory_scores(rewards, "mean"), [0.3333])
    close(trajectory_scores(rewards, "r2g", gamma=0.8), [0.64])
    close(trajectory_scores(rewards, "outcome"), [1.0])


def test_scores_ragged_batch_and_empty_trajectory():
    rewards = [[1.0, 0.0, 0.5], [2.0], [], torch.tensor([0.0, 3.0])]
    close(trajectory_scores(rewards, "sum"), [1.5, 2.0, 0.0, 3.0])
    close(trajectory_scores(rewards, "mean"), [0.5, 2.0, 0.0, 1.5])
    close(trajectory_scores(rewards, "r2g", gamma=0.5), [1.125, 2.0, 0.0, 1.5])
    close(trajectory_scores(rewards, "outcome"), [0.5, 2.0, 0.0, 3.0])


def test_scores_reject_unknown_kind_and_bad_gamma():
    with pytest.raises(ValueError, match="unknown score kind 'total'"):
        trajectory_scores([[1.0]], "total")
    with pytest.raises(ValueError, match="gamma"):
        trajectory_scores([[1.0]], "r2g", gamma=1.5)


def test_grpo_uses_unbiased_std():
    adv = group_advantages([1.0, 0.0, 0.0, 1.0], ["t", "t", "t", "t"], "grpo", eps=EPS)
    expected = 0.5 / (math.sqrt(1.0 / 3.0) + EPS)  # population std would give exactly 1
    close(adv, [expected, -expected, -expected, expected], tol=1e-6)


def test_grpo_group_of_one_uses_mean_zero_std_one():
    adv = group_advantages([2.0, 1.0, 3.0], ["solo", "pair", "pair"], "grpo", eps=EPS)
    pair = 1.0 / (math.sqrt(2.0) + EPS)
    close(adv, [2.0 / (1 + EPS), -pair, pair], tol=1e-6)


def test_grpo_identical_scores_give_zero():
    close(group_advantages([0.7, 0.7, 0.7], [1, 1, 1], "grpo"), [0.0, 0.0, 0.0], tol=1e-9)


def test_drgrpo_subtracts_group_mean_only():
    adv = group_advantages([1.0, 0.0, 0.0, 1.0, 5.0], [0, 0, 0, 0, 9], "drgrpo")
    close(adv, [0.5, -0.5, -0.5, 0.5, 5.0], tol=1e-7)


def test_rloo_leave_one_out_baseline():
    adv = group_advantages([1.0, 0.0, 0.0, 4.0, 2.0, 7.0], [0, 0, 0, 1, 1, 2], "rloo")
    close(adv, [1.0, -0.5, -0.5, 2.0, -2.0, 7.0], tol=1e-7)


def test_reinforce_pp_group_mean_then_batch_std():
    adv = group_advantages([1.0, 0.0, 3.0, 1.0], ["a", "a", "b", "b"], "reinforce++", eps=EPS)
    batch_std = math.sqrt(2.5 / 3.0)  # centred [.5, -.5, 1, -1], unbiased
    close(adv, [x / (batch_std + EPS) for x in (0.5, -0.5, 1.0, -1.0)], tol=1e-6)


def test_group_ids_may_be_tensors_and_must_match_length():
    adv = group_advantages(torch.tensor([1.0, 0.0]), torch.tensor([3, 3]), "drgrpo")
    close(adv, [0.5, -0.5])
    with pytest.raises(ValueError, match="group ids"):
        group_advantages([1.0, 0.0], [3], "grpo")
    with pytest.raises(ValueError, match="unknown advantage kind"):
        group_advantages([1.0], [0], "ppo")
