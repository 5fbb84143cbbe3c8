"""Function gym: deduce a hidden arithmetic rule over four numbers, then apply it to a test case.

Seeded by UserRL's FunctionGym; needs no LLM (the natural first gym for a CPU quickstart).
See README.md for the task, reward, data and measured baselines.
"""

from __future__ import annotations

import random

from gyms.common.actions import call_message
from gyms.common.episode import count_assistant_turns
from gyms.function.data import build_tasks
from gyms.function.env import FunctionEnv
from gyms.function.rule import evaluate
from mua.gym import GymContext, GymSpec

PROBES = ([1, 1, 1, 1], [2, 1, 1, 1], [1, 2, 1, 1], [1, 1, 2, 1], [1, 1, 1, 2])


def make_env(ctx: GymContext) -> FunctionEnv:
    return FunctionEnv(ctx)


def expert(ctx: GymContext):
    """Probe one input at a time, fetch the test case, then answer (computed from the hidden rule)."""

    async def policy(messages: list[dict], task) -> dict:
        turn = count_assistant_turns(messages)
        if turn < len(PROBES):
            return call_message(
                "action", " ".join(map(str, PROBES[turn])), "Vary one input at a time."
            )
        if turn == len(PROBES):
            return call_message("search", "test")
        value = evaluate(task.payload["rule"], task.payload["test_case"])
        return call_message("answer", repr(value))

    return policy


def random_action(rng: random.Random) -> str:
    kind = rng.random()
    if kind < 0.45:
        return "[action] " + " ".join(
            str(rng.randint(-5, 9)) for _ in range(rng.choice([3, 4, 4, 4, 5]))
        )
    if kind < 0.55:
        return "[search] test"
    if kind < 0.9:
        return f"[answer] {rng.randint(-20, 60)}"
    return rng.choice(["[finish]", "I think it is a sum.", "[answer] many", "[search] rule"])


GYM = GymSpec(
    name="function",
    description="Find a hidden arithmetic rule over a, b, c, d by probing it, then compute it on a test case.",
    make_env=make_env,
    build_tasks=build_tasks,
    expert=expert,
    reward_components={"answer": 1.0},
    random_action=random_action,
    budgets={"max_turns": 16, "max_total_tokens": 4096, "max_new_tokens_per_turn": 256},
)
