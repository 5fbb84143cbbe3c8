"""B2's ideal-engine reference: the cost fit and the simulation's limits."""

from __future__ import annotations

import pytest

from bench._b2_bound import Workload, fit_step_cost, ideal_scores


def test_fit_passes_through_both_measured_points():
    fixed, per_row = fit_step_cost(0.003, 0.0093, 64)
    assert fixed + per_row == pytest.approx(0.003)
    assert fixed + 64 * per_row == pytest.approx(0.0093)
    assert fit_step_cost(0.004, 0.003, 64) == (0.004, 0.0)  # never a negative per-row cost


def test_negligible_users_cost_at_most_one_lone_step_per_turn():
    # users answer in ~1 us: async decodes in lockstep with generation alone, except that the
    # first reply of each turn starts a one-row step before the others arrive
    work = Workload(8, 3, 5, 1e-6, 0.5)
    fixed, per_row = 1e-3, 1e-4
    scores = ideal_scores(work, fixed_s=fixed, per_row_s=per_row, seeds=3)
    generation = 3 * 5 * (fixed + 8 * per_row)
    assert scores["generation_only_seconds"] == pytest.approx(generation)
    assert generation < scores["async_seconds"] < generation + 3 * (fixed + per_row) + 1e-4
    assert scores["turn_sync_seconds"] == pytest.approx(generation, abs=1e-4)


def test_slow_users_cost_turn_sync_a_max_per_turn_and_async_one_chain():
    # generation is nearly free: turn-sync waits for the slowest of 64 users each turn, the async
    # engine only for the slowest conversation's own chain of waits
    work = Workload(64, 4, 2, 0.2, 0.5)
    scores = ideal_scores(work, fixed_s=1e-6, per_row_s=1e-9, seeds=5)
    assert scores["turn_sync_seconds"] > 4 * 0.2 * 1.5  # a max of 64 is well above the mean
    assert 4 * 0.2 < scores["async_seconds"] < scores["turn_sync_seconds"]
    assert scores["speedup_vs_turn_sync"] > 1.3
