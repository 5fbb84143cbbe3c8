"""B1's shared workload: the prompts, the reward function, and a one-turn gym that scores with it.

Both sides of B1 import this file (mua in the project's environment, TRL in bench/.venv), so
they see the same 8 prompts and score completions with the same function. The reward is cheap
and varies between samples (the share of vowels in the completion text), so every GRPO group
has non-zero advantages and both trainers do a real update. Nothing here imports torch.
"""

from __future__ import annotations

import os

MODEL_SMALL = "tiny:qwen2-1m"
MODEL_LARGE = "tiny:qwen2-10m"
NUM_PROMPTS = 8
NUM_GENERATIONS = 4
MAX_NEW_TOKENS = 32
LEARNING_RATE = 1e-5
CLIP_EPSILON = 0.2
# 2 as specified; on a machine whose cores are busy with other work, 2 OpenMP threads per side
# spin against each other, so MUA_BENCH_THREADS=1 gives saner numbers there (both sides alike).
NUM_THREADS = int(os.environ.get("MUA_BENCH_THREADS", "2"))
SEED = 0

PROMPTS = [
    "Book me a window seat on the morning flight.",
    "What is the refund policy for a cancelled train ticket?",
    "Change my hotel booking to next Friday, please.",
    "How much does an extra bag cost on a return flight?",
    "Find the cheapest night train to the city.",
    "Can I bring my bike on the train?",
    "My baggage did not arrive; what should I do?",
    "Cancel the second night of my hotel stay.",
]


def reward_of(text: str) -> float:
    """The share of vowels among the letters of a completion (0 when it has no letters)."""
    letters = [c for c in text.lower() if c.isalpha()]
    return sum(c in "aeiou" for c in letters) / len(letters) if letters else 0.0


def chat_prompt(i: int) -> list[dict]:
    return [{"role": "user", "content": PROMPTS[i]}]


# ---- mua side: a one-turn gym scored by `reward_of` -----------------------------------------


class OneTurnEnv:
    """Shows the task's prompt, scores the single assistant turn, ends the episode."""

    async def reset(self, task):
        from mua.gym.api import ResetResult

        return ResetResult(messages=list(task.prompt))

    async def step(self, action):
        from mua.gym.api import StepResult

        return StepResult(reward=reward_of(action.raw or action.text), done=True)

    async def close(self) -> None:
        return None


GYM_NAME = "b1-vowels"


def register() -> None:
    """Make the one-turn gym a registered gym of this process, so a recipe can name it and the
    trainer's rollouts run it (`mua.gym.registry`; mua side only)."""
    from mua.gym.registry import BUILTIN_GYMS

    BUILTIN_GYMS[GYM_NAME] = f"{__name__}:GYM"


def __getattr__(name: str):
    if name == "GYM":  # built on first use: the TRL side never imports mua's gym API
        return gym_spec()
    raise AttributeError(name)


def gym_spec():
    from mua.gym.api import GymSpec

    return GymSpec(
        name=GYM_NAME,
        description="One turn, reward = share of vowels.",
        make_env=lambda ctx: OneTurnEnv(),
        build_tasks=lambda *a, **k: {"train": tasks()},
    )


def tasks():
    from mua.gym.api import Task

    return [
        Task(task_id=f"b1-{i}", gym=GYM_NAME, split="train", prompt=chat_prompt(i), payload={})
        for i in range(NUM_PROMPTS)
    ]
