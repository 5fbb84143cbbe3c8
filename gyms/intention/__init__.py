"""Clarify a vague request by asking about its missing details.

The intention gym, seeded by UserRL's IntentionGym, without its leak: the simulated requester never
sees the list of missing details. Scripted judge/requester offline, LLM judge/requester through
`ctx.llm`. See README.md.
"""

from __future__ import annotations

import random

from gyms.common.actions import call_message
from gyms.common.spec import interact_gym
from gyms.intention.data import build_tasks
from gyms.intention.env import IntentionEnv
from gyms.intention.seat import SEAT
from mua.gym import Task


def _ordered(details: list[dict]) -> list[dict]:
    return sorted(details, key=lambda d: -int(d["importance"]))


def next_question(turn: int, task: Task) -> dict:
    """Ask about each missing detail in order of importance, one per question."""
    details = _ordered(task.payload["missing_details"])
    if turn >= len(details):
        return call_message("finish")
    d = details[turn]
    question = d["inquiry"] if task.source == "builtin" else f"{d['inquiry']} ({d['description']})"
    return call_message("action", question)


_FILLER = [
    "Can you tell me more?",
    "What do you want?",
    "Anything else?",
    "Is that all?",
    "Hello!",
    "What colour do you like?",
    "Could you clarify?",
    "What is your name?",
]


def random_action(rng: random.Random) -> str:
    roll = rng.random()
    if roll < 0.8:
        return f"[action] {rng.choice(_FILLER)}"
    return rng.choice(["[finish]", "[answer] done", "ok", "[search] details"])


GYM = interact_gym(__doc__, IntentionEnv, build_tasks, next_question, random_action)
GYM.user_seat = SEAT
