"""Find a hidden arithmetic rule over a, b, c, d by probing it, then compute it on a test case.

The function gym, seeded by UserRL's FunctionGym; needs no LLM (the natural first gym for a CPU
quickstart). See README.md for the task, reward, data and measured baselines.
"""

from __future__ import annotations

import random

from gyms.common.actions import call_message
from gyms.common.spec import interact_gym
from gyms.function.data import build_tasks
from gyms.function.env import FunctionEnv
from gyms.function.rule import evaluate
from mua.gym import Task

PROBES = ([1, 1, 1, 1], [2, 1, 1, 1], [1, 2, 1, 1], [1, 1, 2, 1], [1, 1, 1, 2])


def next_move(turn: int, task: Task) -> dict:
    """Probe one input at a time, fetch the test case, then answer (computed from the hidden rule)."""
    if turn < len(PROBES):
        return call_message("action", " ".join(map(str, PROBES[turn])), "Vary one input at a time.")
    if turn == len(PROBES):
        return call_message("search", "test")
    value = evaluate(task.payload["rule"], task.payload["test_case"])
    return call_message("answer", repr(value))


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


GYM = interact_gym(__doc__, FunctionEnv, build_tasks, next_move, random_action, max_turns=16)
