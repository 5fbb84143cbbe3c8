"""Guess a hidden integer in 1..N; the user replies higher or lower.

The guess gym, the CPU quickstart: find the hidden number from "higher"/"lower" replies. Exposes
`GYM`, the scripted binary-search expert (optionally careless: gym option `expert_noise`) and a
random policy. See README.md.
"""

from __future__ import annotations

import random
import re

from gyms.common.spec import package_gym
from gyms.guess.env import GuessEnv
from gyms.guess.seat import SEAT
from gyms.guess.tasks import build_tasks
from mua.errors import UsageError
from mua.gym import GymContext, Task

_ANSWER = re.compile(r"\[\s*answer\s*\]\s*([-+]?\d+)", re.I)


def _bounds(messages: list[dict], max_number: int) -> tuple[int, int]:
    """Range still possible after the guesses and replies in `messages`."""
    low, high = 1, max_number
    last_guess = None
    for msg in messages:
        if msg["role"] == "assistant":
            match = _ANSWER.search(msg.get("content") or "")
            last_guess = int(match.group(1)) if match else None
        elif msg["role"] == "user" and last_guess is not None:
            reply = (msg.get("content") or "").strip().lower()
            if reply.startswith("higher"):
                low = max(low, last_guess + 1)
            elif reply.startswith("lower"):
                high = min(high, last_guess - 1)
            last_guess = None
    return low, high


def expert_noise(options: dict) -> float:
    """The `expert_noise` gym option: chance that an expert guess is careless (default 0)."""
    value = options.get("expert_noise", 0.0)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
        raise UsageError(f"gym.options.expert_noise must be a number from 0 to 1, got {value!r}")
    return float(value)


def expert(ctx: GymContext):
    """Binary search over the replies so far; at most ceil(log2(N + 1)) guesses.

    With `gym.options.expert_noise` = p > 0 each guess is, with probability p, a careless one drawn
    uniformly from 1..2N (half of them out of range, replies ignored): a weaker, less predictable
    player whose imitation leaves reinforcement learning something to improve. The draws are seeded
    by the context seed, the task and the turn, so the same run gives the same conversations.
    """
    noise = expert_noise(ctx.options)

    async def act(messages: list[dict], task: Task) -> dict:
        max_number = int(task.payload.get("max_number", 16))
        rng = random.Random(f"{ctx.seed}:{task.task_id}:{len(messages)}")
        if noise > 0.0 and rng.random() < noise:
            return {"role": "assistant", "content": f"[answer] {rng.randint(1, 2 * max_number)}"}
        low, high = _bounds(messages, max_number)
        return {"role": "assistant", "content": f"[answer] {(low + max(low, high)) // 2}"}

    return act


def score_conversation(messages: list[dict], task: Task, ctx: GymContext) -> float:
    """1.0 when an assistant message of a conversation held through the gateway named the
    target: as `[answer] N` in its text or as an integer argument of a tool call."""
    target = int(task.payload["target"])
    for msg in messages:
        if msg.get("role") != "assistant":
            continue
        match = _ANSWER.search(msg.get("content") or "")
        if match and int(match.group(1)) == target:
            return 1.0
        for call in msg.get("tool_calls") or []:
            args = (call.get("function") or {}).get("arguments")
            values = args.values() if isinstance(args, dict) else []
            if any(isinstance(v, int) and not isinstance(v, bool) and v == target for v in values):
                return 1.0
    return 0.0


def random_action(rng: random.Random) -> str:
    """A uniformly random guess in 1..16 (the random-policy baseline)."""
    return f"[answer] {rng.randint(1, 16)}"


GYM = package_gym(
    __name__,
    __doc__,
    GuessEnv,
    build_tasks,
    expert,
    random_action,
    reward_components={"correct": 1.0},
    tool_format="bracket",
    score_conversation=score_conversation,
    budgets={"max_turns": 8, "max_total_tokens": 1024},
    user_seat=SEAT,
)
