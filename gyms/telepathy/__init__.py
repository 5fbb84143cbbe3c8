"""Guess a hidden entity by asking yes/no questions.

The telepathy gym (twenty questions), seeded by UserRL's TelepathyGym. Scripted oracle/judge for
offline runs, LLM oracle/judge through `ctx.llm`. See README.md.
"""

from __future__ import annotations

import random

from gyms.common.actions import call_message
from gyms.common.spec import interact_gym
from gyms.telepathy.data import ATTRIBUTES, build_tasks
from gyms.telepathy.env import TelepathyEnv
from gyms.telepathy.seat import SEAT
from mua.gym import Task

_PROBE_ORDER = (
    "person",
    "animal",
    "food",
    "place",
    "fictional",
    "manmade",
    "space",
    "europe",
    "asia",
    "america",
)


def next_question(turn: int, task: Task) -> dict:
    """Ask up to three category questions the entity satisfies, then name it."""
    attributes = task.payload.get("attributes") or []
    probes = [a for a in _PROBE_ORDER if a in attributes][:3]
    if turn < len(probes):
        return call_message(
            "action",
            f"Is it {'a ' if probes[turn] in ('person', 'animal', 'place') else ''}{ATTRIBUTES[probes[turn]][0]}?",
        )
    return call_message("answer", task.payload["name"])


def random_action(rng: random.Random) -> str:
    if rng.random() < 0.7:
        return f"[action] Is it {rng.choice(list(ATTRIBUTES))}?"
    if rng.random() < 0.9:
        return f"[answer] {rng.choice(['a rock', 'the ocean', 'a teapot', 'Napoleon', 'Zebra', 'a cloud', 'Lion'])}"
    return rng.choice(["[finish]", "hmm", "[answer]", "[search] wiki"])


GYM = interact_gym(
    __doc__,
    TelepathyEnv,
    build_tasks,
    next_question,
    random_action,
    max_turns=20,
    max_new_tokens_per_turn=128,
)
GYM.user_seat = SEAT
