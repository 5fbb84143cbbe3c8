"""Filters (§7) and metrics (§10): dynamic sampling, termination masking, pass@k and pass^k."""

from __future__ import annotations

import pytest
import torch

from mua.algo import (
    mean_pass_at_k,
    mean_pass_hat_k,
    pass_at_k,
    pass_hat_k,
    success_counts,
    termination_mask,
    zero_variance_groups,
)

torch.set_num_threads(1)


def test_zero_variance_groups():
    scores = [1.0, 1.0, 0.0, 1.0, 0.5, 0.5, 2.0]
    groups = ["a", "a", "b", "b", "c", "c", "d"]
    flags = zero_variance_groups(scores, groups)
    assert flags.tolist() == [True, True, False, False, True, True, True]
    assert zero_variance_groups(torch.tensor([0.0, 1e-12]), [0, 0]).tolist() == [True, True]
    assert zero_variance_groups(torch.tensor([0.0, 1e-3]), [0, 0]).tolist() == [False, False]


def test_termination_mask_failures_always_truncation_optionally():
    reasons = [
        "done",
        "length",
        "user_failure",
        "timeout",
        "max_turns",
        "engine_error",
        "drift",
        "parse_failure",
        "env_error",
    ]
    assert termination_mask(reasons, mask_truncated=False).tolist() == [1, 1, 0, 0, 1, 0, 0, 1, 0]
    assert termination_mask(reasons, mask_truncated=True).tolist() == [1, 0, 0, 0, 0, 0, 0, 1, 0]


def test_pass_at_k_and_pass_hat_k_by_hand():
    assert pass_at_k(5, 2, 2) == pytest.approx(1 - 3 / 10)
    assert pass_hat_k(5, 2, 2) == pytest.approx(1 / 10)
    assert pass_at_k(4, 3, 1) == pytest.approx(0.75) == pass_hat_k(4, 3, 1)
    assert pass_at_k(4, 0, 3) == 0.0 and pass_hat_k(4, 0, 3) == 0.0
    assert pass_at_k(4, 4, 4) == 1.0 and pass_hat_k(4, 4, 4) == 1.0
    assert pass_at_k(4, 1, 4) == 1.0 and pass_hat_k(4, 3, 4) == 0.0


def test_averages_over_tasks():
    trials = success_counts(
        ["t1", "t2", "t1", "t2", "t1", "t2", "t1", "t2"],
        [True, True, False, True, True, True, False, True],
    )
    assert trials == [(4, 2), (4, 4)]
    assert mean_pass_hat_k(trials, 2) == pytest.approx((1 / 6 + 1) / 2)
    assert mean_pass_at_k(trials, 2) == pytest.approx(((1 - 1 / 6) + 1) / 2)


def test_metric_input_errors():
    with pytest.raises(ValueError, match="k=5"):
        pass_hat_k(4, 2, 5)
    with pytest.raises(ValueError, match="successes"):
        pass_at_k(4, 5, 1)
    with pytest.raises(ValueError, match="no tasks"):
        mean_pass_at_k([], 1)
