"""B12's agent programs: the guess gym's own game played through the gateway, as entry points
(`play(base_url, api_key, task)`), so the gateway sides of B12 run the same conversations as
the built-in loop: the task's prompt, `[answer] N` read with the bracket reader, the gym's env
answering. Each returns the episode's reward.

`play` posts the chat requests as plain JSON over HTTP (aiohttp), `play_responses` and
`play_messages` the same conversation as plain JSON to the Responses API (`/v1/responses`) and
the Messages API (`/v1/messages`, the key as `x-api-key`), `play_sdk` with the `openai` SDK; the SDK's client, whose construction loads the TLS certificates, is made once per event
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


def _messages_body(messages: list[dict]) -> dict:
    system = [m["content"] for m in messages if m["role"] == "system"]
    rest = [m for m in messages if m["role"] != "system"]
    return {"model": "policy", "max_tokens": 1024, "system": "\n".join(system), "messages": rest}


def _output_text(reply: dict) -> str:
    return "".join(
        part["text"]
        for item in reply["output"]
        if item["type"] == "message"
        for part in item["content"]
    )


API = {  # path, request body, the reply's text, the key's header
    "chat": (
        "/chat/completions",
        lambda messages: {"model": "policy", "messages": messages},
        lambda reply: reply["choices"][0]["message"]["content"] or "",
        lambda key: {"Authorization": f"Bearer {key}"},
    ),
    "responses": (
        "/responses",
        lambda messages: {"model": "policy", "input": messages},
        _output_text,
        lambda key: {"Authorization": f"Bearer {key}"},
    ),
    "messages": (
        "/messages",
        _messages_body,
        lambda reply: "".join(b.get("text", "") for b in reply["content"] if b["type"] == "text"),
        lambda key: {"x-api-key": key},
    ),
}


async def _over_http(api: str, base_url: str, api_key: str, task: dict) -> float:
    import aiohttp

    path, body_of, text_of, headers = API[api]
    async with aiohttp.ClientSession(headers=headers(api_key)) as session:

        async def ask(messages: list[dict]) -> str:
            async with session.post(f"{base_url}{path}", json=body_of(messages)) as r:
                r.raise_for_status()
                return text_of(await r.json())

        return await _episode(task, ask)


async def play(base_url: str, api_key: str, task: dict) -> float:
    return await _over_http("chat", base_url, api_key, task)


async def play_responses(base_url: str, api_key: str, task: dict) -> float:
    return await _over_http("responses", base_url, api_key, task)


async def play_messages(base_url: str, api_key: str, task: dict) -> float:
    return await _over_http("messages", base_url, api_key, task)


async def play_sdk(base_url: str, api_key: str, task: dict) -> float:
    from openai import AsyncOpenAI

    def make():
        return AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=0)

    client = _shared(base_url, make).with_options(api_key=api_key)

    async def ask(messages: list[dict]) -> str:
        reply = await client.chat.completions.create(model="policy", messages=messages)
        return reply.choices[0].message.content or ""

    return await _episode(task, ask)
