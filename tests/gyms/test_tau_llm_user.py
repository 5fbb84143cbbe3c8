"""tau's LLM customer end to end: LLMClient against the fake OpenAI-compatible server on 127.0.0.1."""

from __future__ import annotations

import asyncio
import re

import pytest

from gyms.tau import GYM
from mua.config.users import LLMUserConfig
from mua.gym.api import AgentAction, GymContext, ToolCall, UserFailure
from mua.llm.llm_client import LLMClient
from tests.fakes.fake_openai import FakeOpenAIServer


def _customer(request: dict) -> str:
    """A scripted stand-in for the simulator model: reads its instruction from the system prompt."""
    messages = request["messages"]
    instruction = re.search(r"Instruction: (.*)", messages[0]["content"]).group(1)
    agent = messages[-1]["content"].lower()
    if "completed" in agent:
        return "###STOP###"
    if "zip" in agent:
        return "I'm " + re.search(r"Your name is (.+?)\.", instruction).group(1) + "."
    return "Hello, I need to cancel an order."


@pytest.fixture(scope="module")
def task():
    tasks = GYM.build_tasks(None, 0, {})
    return next(t for t in tasks["train"] + tasks["test"] if t.payload["kind"] == "cancel")


def _client(server, retries: int = 2) -> LLMClient:
    return LLMClient(
        LLMUserConfig(
            base_url=server.base_url, model="fake", max_retries=retries, backoff_s=0.01, timeout_s=5
        )
    )


def test_llm_customer_full_episode_scores_one(task):
    cancel = task.payload["actions"][-1]

    async def go(server):
        client = _client(server)
        env = GYM.make_env(GymContext(user_kind="llm", llm=client))
        try:
            reset = await env.reset(task)
            ident = await env.step(AgentAction(text="Sure. What are your name and zip code?"))
            tool = await env.step(
                AgentAction(text="", tool_calls=[ToolCall(cancel["name"], cancel["kwargs"])])
            )
            end = await env.step(AgentAction(text="Your cancellation is completed."))
            return reset, ident, tool, end
        finally:
            await client.aclose()

    with FakeOpenAIServer(_customer) as server:
        reset, ident, tool, end = asyncio.run(go(server))
        requests = [r["json"] for r in server.requests]
    assert reset.messages[1] == {"role": "user", "content": "Hello, I need to cancel an order."}
    assert task.payload["actions"][0]["kwargs"]["zip"] in ident.messages[0]["content"]
    assert '"status": "cancelled"' in tool.messages[0]["content"]
    assert end.done and end.reward == 1.0 and end.info["termination"] == "user_stop"
    # the simulator saw its instruction, the agent's words as 'user' turns, its own as 'assistant'
    assert len(requests) == 3
    last = requests[-1]["messages"]
    assert task.payload["instruction"] in last[0]["content"] and "###STOP###" in last[0]["content"]
    assert [m["role"] for m in last[1:]] == ["user", "assistant", "user", "assistant", "user"]
    assert last[-1]["content"] == "Your cancellation is completed."


def test_llm_customer_failure_propagates_as_user_failure(task):
    async def go(server):
        client = _client(server, retries=1)
        env = GYM.make_env(GymContext(user_kind="llm", llm=client))
        try:
            await env.reset(task)
        finally:
            await client.aclose()

    with FakeOpenAIServer(_customer, faults=lambda i, req: "http500") as server:
        with pytest.raises(UserFailure):
            asyncio.run(go(server))


def test_llm_customer_empty_reply_is_a_user_failure(task):
    async def go(server):
        client = _client(server)
        env = GYM.make_env(GymContext(user_kind="llm", llm=client))
        try:
            await env.reset(task)
        finally:
            await client.aclose()

    with FakeOpenAIServer(lambda request: "   ") as server:
        with pytest.raises(UserFailure, match="empty reply"):
            asyncio.run(go(server))
