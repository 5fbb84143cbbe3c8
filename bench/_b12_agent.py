"""B12's agent programs: the guess gym's own game played through the gateway, as entry points
(`play(base_url, api_key, task)`), so the gateway sides of B12 run the same conversations as
the built-in loop: the task's prompt, `[answer] N` read with the bracket reader, the gym's env
answering. Each returns the episode's reward.

`play` posts the chat requests as plain JSON over HTTP (aiohttp), `play_sdk` with the `openai`
SDK; the SDK's client, whose construction loads the TLS certificates, is made once per event
loop and gateway (as a harness serving many episodes in one process would) and used with each
episode's own session key.
"""

from __future__ import annotations

import asyncio
import os
import weakref

_CLIENTS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # loop -> {url: client}


def _shared(base_url: str, make):
    clients = _CLIENTS.setdefault(asyncio.get_running_loop(), {})
    if base_url not in clients:
        clients[base_url] = make()
    return clients[base_url]


async def _episode(task: dict, ask) -> float:
    from gyms.guess.env import GuessEnv
    from mua.families.bracket import parse_bracket
    from mua.gym import GymContext, Task

    env = GuessEnv(GymContext())
    row = Task(task["task_id"], task["gym"], "train", task["prompt"], task["payload"])
    messages = [dict(m) for m in (await env.reset(row)).messages]
    reward = 0.0
    for _ in range(int(os.environ.get("B12_MAX_TURNS", "4"))):
        content = await ask(messages)
        messages.append({"role": "assistant", "content": content})
        step = await env.step(parse_bracket(content))
        reward += step.reward
        if step.done:
            break
        messages += step.messages
    return reward


async def play(base_url: str, api_key: str, task: dict) -> float:
    import aiohttp

    headers = {"Authorization": f"Bearer {api_key}"}
    async with aiohttp.ClientSession(headers=headers) as session:

        async def ask(messages: list[dict]) -> str:
            body = {"model": "policy", "messages": messages}
            async with session.post(f"{base_url}/chat/completions", json=body) as r:
                r.raise_for_status()
                return (await r.json())["choices"][0]["message"]["content"] or ""

        return await _episode(task, ask)


async def play_sdk(base_url: str, api_key: str, task: dict) -> float:
    from openai import AsyncOpenAI

    def make():
        return AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=0)

    client = _shared(base_url, make).with_options(api_key=api_key)

    async def ask(messages: list[dict]) -> str:
        reply = await client.chat.completions.create(model="policy", messages=messages)
        return reply.choices[0].message.content or ""

    return await _episode(task, ask)
