"""Explain a strange story (turtle soup) by asking yes/no questions about its hidden truth.

The turtle gym, seeded by UserRL's TurtleGym. Scripted oracle/judge for offline runs, LLM
oracle/judge through `ctx.llm`. See README.md.
"""

from __future__ import annotations

import random

from gyms.common.actions import call_message
from gyms.common.spec import interact_gym
from gyms.turtle.data import build_tasks
from gyms.turtle.env import TurtleEnv
from gyms.turtle.seat import SEAT
from mua.gym import Task


def next_question(turn: int, task: Task) -> dict:
    """Ask about two key points, then tell the hidden story."""
    criteria = task.payload["criteria"]
    if turn < min(2, len(criteria)):
        return call_message(
            "action", f"Is it true that {criteria[turn]['statement'].rstrip('.').lower()}?"
        )
    return call_message("answer", task.payload["bottom"])


_WORDS = "the man woman dog letter money police night door rain window car phone ghost doctor mistake".split()


def random_action(rng: random.Random) -> str:
    words = " ".join(rng.choice(_WORDS) for _ in range(rng.randint(2, 6)))
    roll = rng.random()
    if roll < 0.6:
        return f"[action] Is it about {words}?"
    if roll < 0.9:
        return f"[answer] The story is about {words}."
    return rng.choice(["[finish]", "no idea", "[answer]"])


GYM = interact_gym(__doc__, TurtleEnv, build_tasks, next_question, random_action)
GYM.user_seat = SEAT
