"""Intention gym: clarify a vague request by asking about its missing details.

Seeded by UserRL's IntentionGym, without its leak: the simulated requester never sees the list
of missing details. Scripted judge/requester offline, LLM judge/requester through `ctx.llm`.
See README.md.
"""

from __future__ import annotations

import random

from gyms.common.actions import call_message
from gyms.common.episode import count_assistant_turns
from gyms.intention.data import build_tasks
from gyms.intention.env import IntentionEnv
from mua.gym import GymContext, GymSpec


def make_env(ctx: GymContext) -> IntentionEnv:
    return IntentionEnv(ctx)


def _ordered(details: list[dict]) -> list[dict]:
    return sorted(details, key=lambda d: -int(d["importance"]))


def expert(ctx: GymContext):
    """Ask about each missing detail in order of importance, one per question."""

    async def policy(messages: list[dict], task) -> dict:
        turn = count_assistant_turns(messages)
        details = _ordered(task.payload["missing_details"])
        if turn >= len(details):
            return call_message("finish")
        d = details[turn]
        question = (
            d["inquiry"] if task.source == "builtin" else f"{d['inquiry']} ({d['description']})"
        )
        return call_message("action", question)

    return policy


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


GYM = GymSpec(
    name="intention",
    description="Clarify a vague request by asking about its missing details.",
    make_env=make_env,
    build_tasks=build_tasks,
    expert=expert,
    reward_components={"clarify": 1.0},
    random_action=random_action,
    budgets={"max_turns": 12, "max_total_tokens": 4096, "max_new_tokens_per_turn": 256},
)
