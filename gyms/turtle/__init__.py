"""Turtle gym: explain a strange story (turtle soup) by asking yes/no questions.

Seeded by UserRL's TurtleGym. Scripted oracle/judge for offline runs, LLM oracle/judge
through `ctx.llm`. See README.md.
"""

from __future__ import annotations

import random

from gyms.common.actions import call_message
from gyms.common.episode import count_assistant_turns
from gyms.turtle.data import build_tasks
from gyms.turtle.env import TurtleEnv
from mua.gym import GymContext, GymSpec


def make_env(ctx: GymContext) -> TurtleEnv:
    return TurtleEnv(ctx)


def expert(ctx: GymContext):
    """Ask about two key points, then tell the hidden story."""

    async def policy(messages: list[dict], task) -> dict:
        turn = count_assistant_turns(messages)
        criteria = task.payload["criteria"]
        if turn < min(2, len(criteria)):
            return call_message(
                "action", f"Is it true that {criteria[turn]['statement'].rstrip('.').lower()}?"
            )
        return call_message("answer", task.payload["bottom"])

    return policy


_WORDS = "the man woman dog letter money police night door rain window car phone ghost doctor mistake".split()


def random_action(rng: random.Random) -> str:
    words = " ".join(rng.choice(_WORDS) for _ in range(rng.randint(2, 6)))
    roll = rng.random()
    if roll < 0.6:
        return f"[action] Is it about {words}?"
    if roll < 0.9:
        return f"[answer] The story is about {words}."
    return rng.choice(["[finish]", "no idea", "[answer]"])


GYM = GymSpec(
    name="turtle",
    description="Explain a strange story (turtle soup) by asking yes/no questions about its hidden truth.",
    make_env=make_env,
    build_tasks=build_tasks,
    expert=expert,
    reward_components={"story": 1.0},
    random_action=random_action,
    budgets={"max_turns": 12, "max_total_tokens": 4096, "max_new_tokens_per_turn": 256},
)
