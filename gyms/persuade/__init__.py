"""Persuade gym: move a persuadee from Strongly Agree toward Strongly Disagree on a claim.

Seeded by UserRL's PersuadeGym, with reward paid only for a new maximum stance (no oscillation
farming). Scripted persuadee offline, LLM persuadee through `ctx.llm`. See README.md.
"""

from __future__ import annotations

import random

from gyms.common.actions import call_message
from gyms.common.episode import count_assistant_turns
from gyms.persuade.data import build_tasks
from gyms.persuade.env import PersuadeEnv
from mua.gym import GymContext, GymSpec


def make_env(ctx: GymContext) -> PersuadeEnv:
    return PersuadeEnv(ctx)


def expert(ctx: GymContext):
    """Raise one counter-argument per turn."""

    async def policy(messages: list[dict], task) -> dict:
        points = task.payload["points"]
        turn = count_assistant_turns(messages)
        if turn >= len(points):
            return call_message("finish")
        return call_message("answer", f"Consider this: {points[turn]['point']}")

    return policy


_LINES = [
    "You are wrong.",
    "Please change your mind.",
    "I disagree strongly.",
    "Think about it again.",
    "Everyone knows this is false.",
    "That claim is silly.",
    "Are you sure?",
]


def random_action(rng: random.Random) -> str:
    if rng.random() < 0.85:
        return f"[{rng.choice(['answer', 'action'])}] {rng.choice(_LINES)}"
    return rng.choice(["[finish]", "[search] arguments", "hmm"])


GYM = GymSpec(
    name="persuade",
    description="Persuade someone to move from Strongly Agree toward Strongly Disagree on a claim.",
    make_env=make_env,
    build_tasks=build_tasks,
    expert=expert,
    reward_components={"persuade": 1.0},
    random_action=random_action,
    budgets={"max_turns": 12, "max_total_tokens": 4096, "max_new_tokens_per_turn": 256},
)
