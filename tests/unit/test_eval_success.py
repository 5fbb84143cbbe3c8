"""What `mua eval` counts as a success: a reward at the threshold, within rounding."""

from __future__ import annotations

from types import SimpleNamespace

from gyms.persuade.reward import MAX_LEVEL, forward_move_reward
from mua.eval.summary import result_row


def _traj(reward: float) -> SimpleNamespace:
    return SimpleNamespace(
        metrics={},
        termination="done",
        task_id="t",
        sample_index=0,
        reward=reward,
        detail="",
        num_turns=3,
        token_ids=[],
        reward_components={},
        messages=[],
    )


def test_a_full_win_paid_in_rounded_steps_is_a_success():
    # UserRL's persuade rules pay each move of the stance, rounded to six digits: a full win
    # in three moves of two stances sums to 0.999999 and must count as reaching the full score
    total = sum(forward_move_reward(level + 2, level) for level in range(0, MAX_LEVEL, 2))
    assert total < 1.0
    assert result_row(_traj(total), "persuade")["success"]


def test_a_reward_short_of_the_threshold_is_no_success():
    assert not result_row(_traj(0.999), "persuade")["success"]
    assert not result_row(_traj(0.49), "g", success_threshold=0.5)["success"]
    assert result_row(_traj(0.5), "g", success_threshold=0.5)["success"]
