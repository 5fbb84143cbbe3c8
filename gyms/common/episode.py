"""Drive one env episode with a message-level policy (experts, random baselines, tests).

This is a minimal loop for gym tests and README numbers, not the rollout runner: no tokens,
no engine, no transcript. A policy is `async (messages, task) -> assistant message dict`.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field

from gyms.common.actions import action_from_message, parse_bracket_text
from mua.gym import Env, Task


@dataclass
class EpisodeResult:
    total_reward: float
    turns: int
    done: bool
    messages: list[dict] = field(default_factory=list)
    components: dict[str, float] = field(default_factory=dict)


async def run_episode(env: Env, task: Task, policy, max_turns: int = 30) -> EpisodeResult:
    reset = await env.reset(task)
    messages = list(reset.messages)
    total, components, done, turns = 0.0, {}, False, 0
    try:
        while not done and turns < max_turns:
            reply = await policy(messages, task)
            action = action_from_message(reply)
            messages.append(action.as_message())
            result = await env.step(action)
            messages.extend(result.messages)
            total += result.reward
            for k, v in result.components.items():
                components[k] = components.get(k, 0.0) + v
            done, turns = result.done, turns + 1
    finally:
        await env.close()
    return EpisodeResult(total, turns, done, messages, components)


def random_policy(random_action: Callable[[random.Random], str], rng: random.Random):
    """A policy that emits `random_action(rng)` text each turn."""

    async def policy(messages: list[dict], task: Task) -> dict:
        action = parse_bracket_text(random_action(rng))
        return (
            action.as_message()
            if action.tool_calls
            else {"role": "assistant", "content": action.text}
        )

    return policy


def count_assistant_turns(messages: list[dict]) -> int:
    return sum(1 for m in messages if m.get("role") == "assistant")
