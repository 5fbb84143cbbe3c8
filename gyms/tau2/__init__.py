"""tau2 gym: tau2-bench's retail, airline and telecom domains, scored as tau2 v1.0.1 scores.

The agent follows the domain policy, talks to a simulated customer (LLM or scripted) and uses
the domain's tools; in telecom the customer has a phone with tools and state of its own. See
README.md for data, options, reward and what is comparable with tau2's leaderboard.
"""

from __future__ import annotations

from gyms.tau2.env import Tau2Env
from gyms.tau2.expert import expert
from gyms.tau2.tasks import build_tasks
from mua.gym import GymSpec

GYM = GymSpec(
    name="tau2",
    description="tau2-bench customer service (retail, airline, telecom): policy, tools, a user with tools of its own; tau2's reward.",
    make_env=Tau2Env,
    build_tasks=build_tasks,
    expert=expert,
    reward_components={
        "db": 1.0,
        "env_assertion": 1.0,
        "action": 1.0,
        "communicate": 1.0,
        "nl_assertion": 1.0,
    },
    budgets={"max_turns": 60, "max_total_tokens": 32768, "max_new_tokens_per_turn": 1024},
)
