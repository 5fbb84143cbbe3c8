"""Persuade someone to move from Strongly Agree toward Strongly Disagree on a claim.

The persuade gym, seeded by UserRL's PersuadeGym, with reward paid only for a new maximum stance
(no oscillation farming). Scripted persuadee offline, LLM persuadee through `ctx.llm`. See
README.md.
"""

from __future__ import annotations

import random

from gyms.common.actions import call_message
from gyms.common.spec import interact_gym
from gyms.persuade.data import build_tasks
from gyms.persuade.env import PersuadeEnv
from gyms.persuade.seat import SEAT
from mua.gym import Task


def next_argument(turn: int, task: Task) -> dict:
    """Raise one counter-argument per turn."""
    points = task.payload["points"]
    if turn >= len(points):
        return call_message("finish")
    return call_message("answer", f"Consider this: {points[turn]['point']}")


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


GYM = interact_gym(__doc__, PersuadeEnv, build_tasks, next_argument, random_action)
GYM.user_seat = SEAT
