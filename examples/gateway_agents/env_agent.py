"""A generic agent loop written with the `openai` SDK (and `httpx`, which the SDK brings) that
plays any gym through the gateway: the gym's own simulated user and tools answer over HTTP.

It asks `POST {OPENAI_BASE_URL}/env/reset` for the opening messages and tool schemas, then
until the episode is done (or `ENV_AGENT_TURNS`, default 8, turns): one chat completion with
the conversation and the tools, the answer sent to `POST {OPENAI_BASE_URL}/env/step`, whose
replies (user messages, tool results) are appended. It prints `{"reward": total}` last; with
`program.reward: env` mua sums the env's step rewards itself.
"""

from __future__ import annotations

import json
import os

import httpx
from openai import OpenAI


def main() -> None:
    base, key = os.environ["OPENAI_BASE_URL"], os.environ["OPENAI_API_KEY"]
    client = OpenAI(max_retries=0)
    env = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=120)
    opening = env.post("/env/reset").raise_for_status().json()
    messages, tools = opening["messages"], opening["tools"] or None
    total = 0.0
    for _ in range(int(os.environ.get("ENV_AGENT_TURNS", "8"))):
        extra = {"tools": tools} if tools else {}
        reply = client.chat.completions.create(
            model=os.environ.get("MUA_MODEL", "agent"), messages=messages, **extra
        )
        message = reply.choices[0].message.model_dump(exclude_none=True)
        messages.append(message)
        step = env.post("/env/step", json={"message": message}).raise_for_status().json()
        total += step["reward"]
        if step["done"]:
            break
        messages += step["messages"]
    print(json.dumps({"reward": total}))


if __name__ == "__main__":
    main()
