"""Elicit a traveller's implicit preferences, search flights/hotels/..., recommend the best option per aspect.

The `travel` gym. Built-in, procedurally generated scenarios only (see README.md). Exposes `GYM`
(the `GymSpec`) and `random_action(rng)` for baselines.
"""

from __future__ import annotations

from gyms.common.spec import package_gym
from gyms.travel.data import build_tasks
from gyms.travel.env import DEFAULT_WEIGHTS, TravelEnv, bracket_calls
from gyms.travel.expert import make_expert, random_action
from gyms.travel.seat import SEAT

GYM = package_gym(
    __name__,
    __doc__,
    TravelEnv,
    build_tasks,
    make_expert,
    random_action,
    reward_components=dict(DEFAULT_WEIGHTS),
    tool_format="hermes",
    budgets={"max_turns": 16, "max_total_tokens": 8192, "max_new_tokens_per_turn": 512},
)
GYM.user_seat = SEAT

__all__ = ["GYM", "TravelEnv", "bracket_calls", "random_action"]
