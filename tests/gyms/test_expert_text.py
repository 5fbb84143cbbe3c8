"""The `expert_text` gym option of `interact_with_env` gyms: the scripted expert writes its move
as bracket text (`[choice] content`), which plays exactly like its tool call."""

from __future__ import annotations

import asyncio

import pytest

from gyms.common.actions import action_from_message
from gyms.intention import GYM
from mua.errors import UsageError
from mua.gym import GymContext


async def _play(options: dict, task) -> tuple[list[dict], float]:
    ctx = GymContext(options=options)
    expert, env = GYM.expert(ctx), GYM.make_env(ctx)
    await env.reset(task)
    messages, total = [{"role": "user", "content": "start"}], 0.0
    for _ in range(8):
        move = await expert(messages, task)
        messages.append(move)
        result = await env.step(action_from_message(move))
        total += result.reward
        if result.done:
            break
    return [m for m in messages if m["role"] == "assistant"], total


def test_expert_text_writes_bracket_moves_with_the_same_reward():
    task = GYM.build_tasks()["test"][0]
    calls, reward_calls = asyncio.run(_play({}, task))
    texts, reward_texts = asyncio.run(_play({"expert_text": True}, task))
    assert all(m.get("tool_calls") for m in calls)
    assert all(not m.get("tool_calls") and m["content"].startswith("[action] ") for m in texts[:-1])
    question = calls[0]["tool_calls"][0]["function"]["arguments"]["content"]
    assert texts[0]["content"] == f"[action] {question}"
    assert reward_texts == reward_calls > 0


def test_expert_text_must_be_a_bool():
    with pytest.raises(UsageError, match="expert_text must be true or false"):
        GYM.expert(GymContext(options={"expert_text": "yes"}))
