"""The OpenAI agent policy, and LLM-user failures inside the runner, against the fake server."""

from __future__ import annotations

import asyncio
import json

import pytest

from mua.config.rollout import RolloutConfig
from mua.config.users import LLMUserConfig
from mua.errors import RunFailure, UsageError
from mua.gym.api import GymContext, GymSpec, ResetResult, StepResult, Task
from mua.gym.tools import ToolEnv, tool, tool_schema
from mua.llm.llm_client import LLMClient
from mua.rollout.openai_policy import OpenAIPolicy, message_to_action, to_wire_messages
from mua.rollout.policies import MessagePolicy
from tests.fakes.fake_openai import FakeOpenAIServer

pytestmark = pytest.mark.timeout(60)

KEY_ENV = "MUA_TEST_AGENT_KEY"


def lookup(city: str) -> str:
    """Weather of a city.

    Args:
        city: the city name
    """
    return f"sunny in {city}"


TOOLS = [tool_schema(lookup)]


def policy_for(server: FakeOpenAIServer, **overrides) -> OpenAIPolicy:
    settings = dict(
        engine="openai",
        openai={"base_url": server.base_url, "api_key_env": KEY_ENV, "timeout_s": 2.0},
        temperature=0.0,
        max_new_tokens_per_turn=32,
    )
    settings.update(overrides)
    return OpenAIPolicy.from_config(RolloutConfig(**settings), model="agent-model")


def test_native_tool_calls_are_read_and_the_request_carries_tools():
    def reply(_req):
        call = {"id": "c1", "function": {"name": "lookup", "arguments": {"city": "Oslo"}}}
        return {"content": "Checking.", "tool_calls": [call]}

    with FakeOpenAIServer(reply) as server:
        msg = asyncio.run(policy_for(server).act([{"role": "user", "content": "weather?"}], TOOLS))
    assert msg["content"] == "Checking."
    assert msg["tool_calls"] == [
        {
            "id": "c1",
            "type": "function",
            "function": {"name": "lookup", "arguments": {"city": "Oslo"}},
        }
    ]
    sent = server.requests[0]["json"]
    assert sent["model"] == "agent-model" and sent["max_tokens"] == 32
    assert sent["tools"][0]["function"]["name"] == "lookup"
    action = message_to_action(msg)
    assert action.tool_calls[0].name == "lookup" and action.tool_calls[0].arguments == {
        "city": "Oslo"
    }


def test_bad_native_arguments_become_parse_errors():
    def reply(_req):
        return {
            "content": "",
            "tool_calls": [{"function": {"name": "lookup", "arguments": "{city"}}],
        }

    with FakeOpenAIServer(reply) as server:
        msg = asyncio.run(policy_for(server).act([{"role": "user", "content": "?"}], TOOLS))
    assert "tool_calls" not in msg
    assert "lookup" in msg["parse_errors"][0]
    assert message_to_action(msg).parse_errors == msg["parse_errors"]


def test_text_tool_calls_are_parsed_from_content():
    text = (
        'Let me look.\n<tool_call>\n{"name": "lookup", "arguments": {"city": "Rome"}}\n</tool_call>'
    )
    with FakeOpenAIServer(lambda req: text) as server:
        msg = asyncio.run(policy_for(server).act([{"role": "user", "content": "?"}], TOOLS))
    assert msg["content"] == "Let me look."
    assert msg["tool_calls"][0]["function"] == {"name": "lookup", "arguments": {"city": "Rome"}}


def test_plain_answer_and_top_k_in_body():
    with FakeOpenAIServer(lambda req: "It is sunny.") as server:
        msg = asyncio.run(policy_for(server, top_k=5).act([{"role": "user", "content": "?"}], []))
    assert msg == {"role": "assistant", "content": "It is sunny."}
    sent = server.requests[0]["json"]
    assert sent["top_k"] == 5 and "tools" not in sent


def test_history_is_converted_to_the_wire_format():
    history = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "weather in Oslo and Rome?"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"type": "function", "function": {"name": "lookup", "arguments": {"city": "Oslo"}}},
                {"type": "function", "function": {"name": "lookup", "arguments": {"city": "Rome"}}},
            ],
        },
        {"role": "tool", "name": "lookup", "content": "sunny in Oslo"},
        {"role": "tool", "name": "lookup", "content": "sunny in Rome"},
        {"role": "env", "content": "Hint: answer now."},
    ]
    wire = to_wire_messages(history)
    ids = [c["id"] for c in wire[2]["tool_calls"]]
    assert len(set(ids)) == 2
    assert wire[2]["tool_calls"][0]["function"]["arguments"] == json.dumps({"city": "Oslo"})
    assert [w.get("tool_call_id") for w in wire[3:5]] == ids
    assert wire[5] == {"role": "user", "content": "Hint: answer now."}
    assert "name" not in wire[3]


def test_spent_retries_stop_the_run_and_missing_key_is_a_usage_error(monkeypatch):
    with FakeOpenAIServer(faults=lambda i, b: "http500") as server:
        policy = policy_for(server)
        policy.endpoint.backoff_s = 0.01
        with pytest.raises(RunFailure, match="agent endpoint .* 5 attempt"):
            asyncio.run(policy.act([{"role": "user", "content": "?"}], []))
    assert server.total_requests == 5
    monkeypatch.delenv(KEY_ENV, raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with pytest.raises(UsageError, match=KEY_ENV):
        OpenAIPolicy.from_config(
            RolloutConfig(engine="openai", openai={"api_key_env": KEY_ENV}), "m"
        )


# -- inside the runner -------------------------------------------------------------------------


class ChatEnv:
    """Three user turns, each one written by the LLM user; reward 1 when the chat ends."""

    def __init__(self, ctx: GymContext) -> None:
        self.llm = ctx.llm
        self.turns = 0

    async def reset(self, task: Task) -> ResetResult:
        self.task = task
        return ResetResult(messages=list(task.prompt), tools=TOOLS)

    async def step(self, action) -> StepResult:
        self.turns += 1
        if self.turns >= 3:
            return StepResult(reward=1.0, done=True)
        asked = [{"role": "user", "content": f"{self.task.task_id}: {action.text}"}]
        reply = await self.llm.complete(asked)
        return StepResult(messages=[{"role": "user", "content": reply}])

    async def close(self) -> None:
        pass


def chat_gym() -> GymSpec:
    return GymSpec(
        name="chat", description="test", make_env=ChatEnv, build_tasks=lambda *a, **k: {}
    )


def chat_tasks(count: int) -> list[Task]:
    return [
        Task(f"task{i}", "chat", "test", [{"role": "user", "content": f"hello {i}"}], {})
        for i in range(count)
    ]


def run(policy, server: FakeOpenAIServer, tasks: list[Task], **user):
    from mua.models import load_tokenizer
    from mua.rollout.collect import run_rollouts_sync

    cfg = LLMUserConfig(kind="llm", base_url=server.base_url, api_key_env=KEY_ENV, **user)
    ctx = GymContext(user_kind="llm", llm=LLMClient(cfg))
    return run_rollouts_sync(
        tasks,
        n=1,
        policy=policy,
        gym_spec=chat_gym(),
        gym_ctx=ctx,
        tokenizer=load_tokenizer("tiny:qwen2-1m"),
        rollout_cfg=RolloutConfig(max_turns=4, max_total_tokens=2048, call_timeout_s=10),
    ), ctx.llm


def test_user_failure_ends_only_that_trajectory():
    async def agent(messages, task):
        return {"role": "assistant", "content": "How can I help?"}

    # every user request about task1 fails; the others succeed
    def faults(_index, body):
        return "http500" if "task1:" in body["messages"][-1]["content"] else None

    with FakeOpenAIServer(faults=faults) as server:
        trajs, llm = run(MessagePolicy(agent), server, chat_tasks(3), max_retries=2, backoff_s=0.01)
    by_task = {t.task_id: t for t in trajs}
    assert by_task["task1"].termination == "user_failure"
    assert "HTTP 500" in by_task["task1"].detail and "3 attempt(s)" in by_task["task1"].detail
    assert by_task["task0"].termination == "done" and by_task["task2"].termination == "done"
    assert by_task["task0"].reward == 1.0 and by_task["task1"].reward == 0.0
    assert llm.counters["failures"] == 1


def test_openai_agent_and_llm_user_share_one_fake_server():
    def reply(req):
        if req["model"] == "agent-model":
            return "Sure, go on."
        return "I would like some help."

    with FakeOpenAIServer(reply) as server:
        policy = policy_for(server).as_message_policy()
        trajs, _ = run(policy, server, chat_tasks(2), model="user-model")
    assert [t.termination for t in trajs] == ["done", "done"]
    assert all(t.num_turns == 3 for t in trajs)
    contents = [m["content"] for m in trajs[0].messages]
    assert contents.count("Sure, go on.") == 3 and contents.count("I would like some help.") == 2
    assert sum(trajs[0].loss_mask) > 0  # the agent's turns are rendered as assistant tokens


# -- native tool calls that cannot be read, through the runner ---------------------------------


class WeatherEnv(ToolEnv):
    """The `lookup` tool; the episode ends on the third agent turn."""

    def __init__(self, ctx: GymContext) -> None:
        self.turns = 0

    @tool
    def lookup(self, city: str) -> str:
        """Weather of a city.

        Args:
            city: the city name
        """
        return lookup(city)

    async def reset(self, task: Task) -> ResetResult:
        return ResetResult(messages=list(task.prompt), tools=TOOLS)

    async def step(self, action) -> StepResult:
        self.turns += 1
        if self.turns >= 3:
            return StepResult(reward=1.0, done=True)
        return await self.step_tools(action)

    async def close(self) -> None:
        pass


def weather_reply(req):
    """Turn 1: one unreadable and one good native call; turn 2: a string-encoded call; then text."""
    turn = sum(m["role"] == "assistant" for m in req["messages"])
    if turn == 0:
        bad = {"id": "c1", "function": {"name": "lookup", "arguments": '{"city": "Oslo"'}}
        good = {"id": "c2", "function": {"name": "lookup", "arguments": {"city": "Rome"}}}
        return {"content": "", "tool_calls": [bad, good]}
    if turn == 1:
        call = {"id": "c3", "function": {"name": "lookup", "arguments": '{"city": "Lima"}'}}
        return {"content": "", "tool_calls": [call]}
    return "Sunny everywhere."


def run_weather(policy):
    from mua.models import load_tokenizer
    from mua.rollout.collect import run_rollouts_sync

    spec = GymSpec(
        name="weather", description="test", make_env=WeatherEnv, build_tasks=lambda *a, **k: {}
    )
    task = Task("w0", "weather", "test", [{"role": "user", "content": "weather?"}], {})
    (traj,) = run_rollouts_sync(
        [task],
        n=1,
        policy=policy,
        gym_spec=spec,
        gym_ctx=GymContext(),
        tokenizer=load_tokenizer("tiny:qwen2-1m"),
        rollout_cfg=RolloutConfig(max_turns=4, max_total_tokens=4096, call_timeout_s=10),
    )
    return traj


def assert_one_counted_parse_error(traj):
    assert traj.termination == "done" and traj.num_turns == 3
    tool_replies = [m["content"] for m in traj.messages if m["role"] == "tool"]
    assert len(tool_replies) == 3
    assert tool_replies[0].startswith("Error: could not read your tool call")
    assert "lookup" in tool_replies[0] and "not JSON" in tool_replies[0]
    assert tool_replies[1:] == ["sunny in Rome", "sunny in Lima"]
    assert traj.metrics["parse_errors"] == 1.0  # counted once, not once by the runner and the env


def test_unreadable_native_calls_are_counted_parse_errors_with_an_observation():
    with FakeOpenAIServer(weather_reply) as server:
        traj = run_weather(policy_for(server).as_message_policy())
    assert_one_counted_parse_error(traj)


def test_message_policy_reads_wire_format_tool_calls_from_any_actor():
    """An actor that hands back the server's message as it came (arguments as JSON strings)."""
    openai = pytest.importorskip("openai")

    with FakeOpenAIServer(weather_reply) as server:

        async def act(messages, task, tools):
            client = openai.AsyncOpenAI(api_key="EMPTY", base_url=server.base_url, max_retries=0)
            try:
                reply = await client.chat.completions.create(
                    model="agent", messages=to_wire_messages(messages), tools=tools
                )
            finally:
                await client.close()
            return reply.choices[0].message.model_dump()

        traj = run_weather(MessagePolicy(act))
    assert_one_counted_parse_error(traj)
