"""An RL step that rolled out nothing stops the run with one line, instead of logging `loss 0.0`.

The step gets its rollouts from a stand-in for the partial-rollout object; everything after
(scoring, the check, the update) is the real `rl_step`. The update is a trap: reaching it means
the empty step went on.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from mua.config.rollout import RetryConfig
from mua.config.train import GRPOConfig, ParallelConfig
from mua.distributed import DistInfo
from mua.errors import RunFailure
from mua.rollout.token_record import TokenRecord
from mua.rollout.trajectory import Trajectory
from mua.train import rl
from mua.train.partial_rollouts import StepRollouts


def _trajectory(group: int, k: int, termination: str, policy_tokens: int) -> Trajectory:
    return Trajectory(
        task_id=f"t{group}",
        group_id=f"{group}:t{group}",
        sample_index=k,
        record=TokenRecord(
            token_ids=[1, 2, 3, 4],
            loss_mask=[0, 0] + [1] * policy_tokens + [0] * (2 - policy_tokens),
            logprobs=[0.0] * 4,
            turn_index=[-1, -1, 0, 0],
        ),
        turn_rewards=[float(k)],
        reward=float(k),
        termination=termination,
        num_turns=1,
    )


def _step(trajectories: list[Trajectory], monkeypatch, retries=None, dropped_failed=0.0):
    def trap(*args, **kwargs):
        raise AssertionError("the update ran on an empty step")

    monkeypatch.setattr(rl, "update", trap)
    groups = len({t.group_id for t in trajectories})
    carry = SimpleNamespace(
        rollout=lambda **kw: StepRollouts(
            trajectories, [2] * groups, [], {}, {"groups_dropped_failed": dropped_failed}
        ),
    )
    parts = SimpleNamespace(
        sync=SimpleNamespace(engine=None, take_metrics=dict),
        carry=carry,
        runs={"g": None},
        policy=None,
        ref_model=None,
        advantages=None,
    )
    recipe = SimpleNamespace(
        algo=GRPOConfig(),
        parallel=ParallelConfig(),
        rollout=SimpleNamespace(
            n=2, oversample=1.0, temperature=1.0, retries=RetryConfig(**(retries or {}))
        ),
        data=SimpleNamespace(tasks_per_step=max(groups, 1)),
        gyms=[SimpleNamespace(key="g", curriculum=None, standardize_rewards=False)],
        total_steps=3,
    )
    dist = DistInfo(rank=0, world_size=1, local_rank=0, device=torch.device("cpu"), backend="gloo")
    tracker = SimpleNamespace(rollout_progress=lambda step, total: None)
    return rl.rl_step(
        2,
        recipe=recipe,
        dist=dist,
        state=SimpleNamespace(tokenizer=None, model=None),
        parts=parts,
        sampler=None,
        tracker=tracker,
    )


class Reached(Exception):
    pass


def test_a_step_without_trajectories_raises(monkeypatch):
    with pytest.raises(RunFailure, match="step 2 rolled out no trajectories"):
        _step([], monkeypatch)


def test_a_step_whose_groups_were_all_dropped_after_retries_says_so(monkeypatch):
    with pytest.raises(RunFailure, match="step 2 trained no group: all 3 were dropped because"):
        _step([], monkeypatch, retries={"max": 2}, dropped_failed=3.0)


def test_a_step_whose_trajectories_were_all_excluded_is_left_to_stop_empty_steps(monkeypatch):
    """Every trajectory excluded is what `stop.empty_steps` counts (tests/integration's
    test_a_run_with_nothing_to_learn_says_so_and_stops): the step itself does not refuse it."""

    def reached(*args, **kwargs):
        raise Reached

    failed = [_trajectory(g, k, "env_error", 2) for g in range(2) for k in range(2)]
    monkeypatch.setattr(rl, "pre_update_logprobs", reached)
    with pytest.raises(Reached):
        _step(failed, monkeypatch)


def test_a_step_with_trained_tokens_goes_on(monkeypatch):
    """The check lets a normal step through, to the log-probs that follow it."""

    def reached(*args, **kwargs):
        raise Reached

    kept = [_trajectory(0, k, "done", 2) for k in range(2)]
    monkeypatch.setattr(rl, "pre_update_logprobs", reached)
    with pytest.raises(Reached):
        _step(kept, monkeypatch)
