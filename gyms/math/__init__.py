"""Solve a math problem with the answer in \\boxed{}; interventions when a turn ends without one (MuTIS).

The `math` gym, with MuTIS-style interventions. Exposes `GYM` (the `GymSpec`),
`random_action(rng)` and the scripted expert (which computes the answer of a built-in problem
from its parameters, or reads the gold answer of a JSONL task).
"""

from __future__ import annotations

import random

from gyms.common.spec import package_gym
from gyms.math.data import build_tasks
from gyms.math.env import INTERVENTION, MathEnv
from gyms.math.problems import solve
from mua.gym.api import GymContext, Task


def expert_answer(task: Task) -> str:
    payload = task.payload
    if payload.get("kind") in (None, "jsonl"):
        return str(payload["answer"])
    return solve(payload["kind"], payload["params"])


def make_expert(ctx: GymContext):
    async def policy(messages: list[dict], task: Task) -> dict:
        return {
            "role": "assistant",
            "content": f"Working it out exactly, the result is \\boxed{{{expert_answer(task)}}}.",
        }

    return policy


def random_action(rng: random.Random) -> str:
    """A random response: a guessed boxed/tagged answer, rambling without one, or junk."""
    guess = rng.randint(-20, 100)
    return rng.choice(
        [
            f"I think it is \\boxed{{{guess}}}.",
            f"<answer>{guess}</answer>",
            f"Answer: {guess}",
            "Let me think about this step by step. First, we",
            "",
            "\\boxed{",
            "\\boxed{}}}{{",
            f"\\boxed{{\\frac{{{guess}}}{{0}}}}",
            "Answer:",
            '<tool_call>{"name": "calc"}</tool_call>',
        ]
    )


GYM = package_gym(
    __name__,
    __doc__,
    MathEnv,
    build_tasks,
    make_expert,
    random_action,
    reward_components={"correct": 1.0},
    tool_format="hermes",  # no tools; the parser only separates text from stray markup
    budgets={"max_turns": 4, "max_total_tokens": 4096, "max_new_tokens_per_turn": 1024},
)

__all__ = ["GYM", "INTERVENTION", "MathEnv", "expert_answer", "random_action"]
