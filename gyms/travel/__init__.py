"""The `travel` gym: elicit a traveller's preferences, search options, recommend one per aspect.

Built-in, procedurally generated scenarios only (see README.md). Exposes `GYM` (the `GymSpec`)
and `random_action(rng)` for baselines.
"""

from __future__ import annotations

from gyms.travel.data import build_tasks
from gyms.travel.env import DEFAULT_WEIGHTS, TravelEnv, bracket_calls, make_env
from gyms.travel.expert import make_expert, random_action
from mua.gym.api import GymSpec

GYM = GymSpec(
    name="travel",
    description="Elicit a traveller's implicit preferences, search flights/hotels/..., recommend the best option per aspect.",
    make_env=make_env,
    build_tasks=build_tasks,
    expert=make_expert,
    reward_components=dict(DEFAULT_WEIGHTS),
    random_action=random_action,
    tool_format="hermes",
    budgets={"max_turns": 16, "max_total_tokens": 8192, "max_new_tokens_per_turn": 512},
)

__all__ = ["GYM", "TravelEnv", "bracket_calls", "random_action"]
