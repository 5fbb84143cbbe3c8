"""Travel's LLM traveller end to end: LLMClient against the fake OpenAI-compatible server."""

from __future__ import annotations

import asyncio
import json
import re

import pytest

from gyms.travel import GYM
from mua.config.users import LLMUserConfig
from mua.gym.api import AgentAction, GymContext, ToolCall, UserFailure
from mua.llm.llm_client import LLMClient
from tests.fakes.fake_openai import FakeOpenAIServer

MUA = {"rules": "mua"}  # these tests pin the mua rule set; upstream rules: test_travel_upstream.py


def _hidden_ids(request: dict) -> list[str]:
    system = request["messages"][0]["content"]
    return re.findall(r"^(\d+\.\d+) \(", system, flags=re.M)


def _ask(server, task, n_steps=1, question="What do you want in the {aspect}?"):
    aspect = task.payload["aspects"][0]["name"]
    aspect = "rental car" if aspect == "car" else aspect

    async def go():
        cfg = LLMUserConfig(
            base_url=server.base_url, model="fake", max_retries=2, backoff_s=0.01, timeout_s=5
        )
        client = LLMClient(cfg)
        env = GYM.make_env(
            GymContext(options=MUA, user_kind="llm", llm=client, reward_weights={"preference": 1.0})
        )
        await env.reset(task)
        try:
            action = AgentAction(
                text="",
                tool_calls=[
                    ToolCall(
                        "interact_with_env",
                        {"choice": "action", "content": question.format(aspect=aspect)},
                    )
                ],
            )
            return [await env.step(action) for _ in range(n_steps)]
        finally:
            await client.aclose()

    return asyncio.run(go())


@pytest.fixture(scope="module")
def task():
    return GYM.build_tasks(None, 1, {"num_train": 1, "num_test": 1})["test"][0]


def test_llm_traveller_retries_invalid_json_then_reveals(task):
    calls = []

    def reply(request):
        calls.append(request)
        if len(calls) == 1:
            return "Sure! {not json"
        return json.dumps(
            {"reply": "I really need a calm place.", "revealed": [_hidden_ids(request)[0]]}
        )

    with FakeOpenAIServer(reply) as server:
        (result,) = _ask(server, task)
    assert server.total_requests == 2
    assert result.messages[0]["content"] == "I really need a calm place."
    assert result.info["revealed"] == 1
    total = sum(len(a["preferences"]) for a in task.payload["aspects"])
    assert result.components["preference"] == pytest.approx(1 / total)
    # the hidden preferences are in the prompt, the revealed one is gone from the next prompt
    assert "0.0 (" in calls[0]["messages"][0]["content"]


def test_llm_traveller_rejects_unknown_ids_and_fails_loudly(task):
    def reply(request):
        return json.dumps({"reply": "Hmm.", "revealed": ["9.9"]})

    with FakeOpenAIServer(reply) as server:
        with pytest.raises(UserFailure):
            _ask(server, task)
    assert (
        server.total_requests == 3
    )  # first try + 2 retries, then a user failure (never a silent 0)


def test_llm_traveller_without_reveal_counts_toward_proactive(task):
    def reply(request):
        return json.dumps({"reply": "Nice weather today.", "revealed": []})

    with FakeOpenAIServer(reply) as server:
        results = _ask(server, task, n_steps=3, question="How is the {aspect} weather?")
    assert [r.reward for r in results] == [0.0, 0.0, 0.0]
    assert results[2].messages[-1]["content"].startswith("By the way")
