"""tau2's LLM user (with tools of its own) and NL judge against a scripted OpenAI-compatible
server on 127.0.0.1, on a two-sided toy domain: a carrier line and a phone, kept in step by
`sync()` after every tool call, as telecom is. Also solo mode on the same domain."""

from __future__ import annotations

import asyncio
import json

import pytest

from gyms.tau2 import GYM
from gyms.tau2 import domain as domain_module
from gyms.tau2.domain import Tau2Domain, Tau2Environment
from gyms.tau2.expert import expert_message
from gyms.tau2.toolkit import READ, WRITE, DBModel, Toolkit, tool
from mua.config.users import LLMUserConfig
from mua.gym import AgentAction, GymContext, ToolCall
from mua.gym.api import Task
from mua.llm.llm_client import LLMClient
from tests.fakes.fake_openai import FakeOpenAIServer


class CarrierDB(DBModel):
    line_on: bool = True


class PhoneDB(DBModel):
    airplane: bool = False
    has_service: bool = True


class CarrierTools(Toolkit):
    @tool(READ)
    def line_status(self) -> str:
        """Whether the customer's line is on.

        Args:
        """
        return "on" if self.db.line_on else "off"


class PhoneTools(Toolkit):
    @tool(WRITE)
    def toggle_airplane_mode(self) -> str:
        """Switch airplane mode on or off."""
        self.db.airplane = not self.db.airplane
        return f"Airplane mode is now {'on' if self.db.airplane else 'off'}."

    @tool(READ)
    def check_status_bar(self) -> str:
        """What the status bar shows."""
        return "signal" if self.db.has_service else "no service"

    def set_airplane(self, on: bool) -> None:
        self.db.airplane = on

    def service_ok(self) -> bool:
        return self.db.has_service


class PhoneEnvironment(Tau2Environment):
    def sync(self) -> None:
        if self.user is not None:
            self.user.db.has_service = self.agent.db.line_on and not self.user.db.airplane


def make_domain(data_dir) -> Tau2Domain:
    def factory(solo: bool) -> Tau2Environment:
        return PhoneEnvironment(
            "phone", "Help the customer.", CarrierTools(CarrierDB()), PhoneTools(PhoneDB()), solo
        )

    return Tau2Domain(
        "phone", data_dir, "Help the customer.", factory, has_user_tools=True, supports_solo=True
    )


TASK = {
    "id": "no-service",
    "ticket": "The customer's phone shows no service.",
    "user_scenario": {
        "persona": None,
        "instructions": {
            "domain": "phone",
            "reason_for_call": "Your phone has no service.",
            "known_info": "You are Ada.",
            "unknown_info": None,
            "task_instructions": "Do what the agent asks on your phone.",
        },
    },
    "initial_state": {
        "initialization_actions": [
            {"env_type": "user", "func_name": "set_airplane", "arguments": {"on": True}}
        ]
    },
    "evaluation_criteria": {
        "actions": [
            {"action_id": "a", "requestor": "user", "name": "toggle_airplane_mode", "arguments": {}}
        ],
        "env_assertions": [
            {"env_type": "user", "func_name": "service_ok", "arguments": {}, "assert_value": True}
        ],
        "communicate_info": [],
        "nl_assertions": ["The agent asks the customer to switch airplane mode off."],
        "reward_basis": ["ENV_ASSERTION", "ACTION", "NL_ASSERTION"],
    },
}


@pytest.fixture
def data_dir(tmp_path, monkeypatch):
    monkeypatch.setitem(domain_module.DOMAINS, "phone", f"{__name__}:make_domain")
    guides = tmp_path / "tau2" / "user_simulator"
    guides.mkdir(parents=True)
    (tmp_path / "tau2" / "domains").mkdir()
    (guides / "simulation_guidelines.md").write_text("GUIDE-PLAIN <PERSONA_GUIDELINES>")
    (guides / "simulation_guidelines_tools.md").write_text("GUIDE-TOOLS<PERSONA_GUIDELINES>end")
    return tmp_path


def _task() -> Task:
    return Task(
        "tau2-phone-no-service",
        "tau2",
        "base",
        [{"role": "system", "content": "x"}],
        {"domain": "phone", "task": json.loads(json.dumps(TASK))},
    )


def _server_reply(verdict: bool):
    def reply(request: dict) -> str:
        messages = request["messages"]
        system = messages[0]["content"]
        if system.startswith("You grade"):
            return json.dumps(
                {"results": [{"expectedOutcome": "x", "reasoning": "r", "metExpectation": verdict}]}
            )
        last = messages[-1]["content"]
        if last.startswith("[Tool error"):
            return json.dumps({"tool_call": {"name": "toggle_airplane_mode", "arguments": {}}})
        if last.startswith("[Tool result"):
            return "I switched it. The status bar shows signal now."
        if "toggle_airplane_mode" in last:
            # first a call with a wrong argument: the user sees an error and tries again
            return json.dumps(
                {"tool_call": {"name": "toggle_airplane_mode", "arguments": {"bogus": 1}}}
            )
        if "resolved" in last:
            return "Thanks! ###STOP###"
        return "Hi, my phone has no service."

    return reply


async def _conversation(server, options, data_dir):
    client = LLMClient(
        LLMUserConfig(
            base_url=server.base_url, model="fake-user", max_retries=1, backoff_s=0.01, timeout_s=5
        )
    )
    try:
        env = GYM.make_env(
            GymContext(options={"data_dir": str(data_dir), **options}, user_kind="llm", llm=client)
        )
        reset = await env.reset(_task())
        env.service_at_start = env.env.user.db.has_service  # synced after the init action
        seen = list(reset.messages)
        asked = await env.step(
            AgentAction(text="Please do this on your phone: toggle_airplane_mode.")
        )
        seen += asked.messages
        end = await env.step(AgentAction(text="Great, the issue is resolved."))
        seen += end.messages
        return env, reset, asked, end, seen
    finally:
        await client.aclose()


def test_llm_user_calls_its_tools_and_judge_scores(data_dir):
    with FakeOpenAIServer(_server_reply(True)) as server:
        env, reset, asked, end, seen = asyncio.run(
            _conversation(server, {"judge": "user"}, data_dir)
        )
    assert reset.messages[-1] == {"role": "user", "content": "Hi, my phone has no service."}
    assert [t["function"]["name"] for t in reset.tools] == ["line_status"]
    assert asked.messages == [
        {"role": "user", "content": "I switched it. The status bar shows signal now."}
    ]
    assert not any("Airplane mode is now" in (m.get("content") or "") for m in seen)
    # the bad call reached the user as an error, the good one ran and sync restored service
    assert env.calls[0]["arguments"] == {"bogus": 1}
    assert env.service_at_start is False
    assert env.env.user.db.airplane is False and env.env.user.db.has_service is True
    user_prompt = env.user.messages[0]["content"]
    assert user_prompt.startswith("GUIDE-TOOLSend") and "<scenario>" in user_prompt
    assert "\tReason for call:\n\t\tYour phone has no service." in user_prompt
    assert any(
        m["content"].startswith("[Tool error from toggle_airplane_mode]\nError: ")
        for m in env.user.messages
    )
    assert end.done and end.info["termination"] == "user_stop"
    assert end.reward == 1.0
    assert end.components == {"env_assertion": 1.0, "action": 1.0, "nl_assertion": 1.0}
    assert end.info["user_model"] == "fake-user"


def test_judge_verdict_false_fails_the_nl_component(data_dir):
    with FakeOpenAIServer(_server_reply(False)) as server:
        *_, end, _ = asyncio.run(_conversation(server, {"judge": "user"}, data_dir))
    assert end.reward == 0.0 and end.components["nl_assertion"] == 0.0
    assert end.components["env_assertion"] == 1.0


def test_non_cooperative_persona_reaches_the_user_prompt(data_dir):
    with FakeOpenAIServer(_server_reply(True)) as server:
        env, *_ = asyncio.run(
            _conversation(server, {"judge": "user", "persona": "non_cooperative"}, data_dir)
        )
    assert "reluctant customer" in env.user.messages[0]["content"]


def test_solo_mode_gives_the_agent_both_tool_sets(data_dir):
    async def go():
        env = GYM.make_env(
            GymContext(options={"data_dir": str(data_dir), "solo": True, "basis": "no_nl"})
        )
        task = _task()
        reset = await env.reset(task)
        names = [t["function"]["name"] for t in reset.tools]
        messages = list(reset.messages)
        for _ in range(5):
            msg = expert_message(messages, task, solo=True)
            messages.append(msg)
            call = msg["tool_calls"][0]["function"]
            out = await env.step(
                AgentAction(text="", tool_calls=[ToolCall(call["name"], call["arguments"])])
            )
            messages += out.messages
            if out.done:
                return names, reset, out
        raise AssertionError("solo episode did not end")

    names, reset, out = asyncio.run(go())
    assert names == ["line_status", "toggle_airplane_mode", "check_status_bar", "done"]
    assert (
        "<ticket>\nThe customer's phone shows no service.\n</ticket>"
        in reset.messages[0]["content"]
    )
    assert out.info["termination"] == "agent_stop" and out.reward == 1.0
    assert out.info["user_model"] == "none (solo)"


def test_a_user_that_only_sends_tool_calls_is_a_user_failure_not_a_stop(data_dir):
    """A user model that never writes a message breaks protocol: the trajectory is masked as the
    user's failure, never read as `###STOP###` and scored against the agent."""
    from mua.gym.api import UserFailure

    def only_calls(request: dict) -> str:
        if request["messages"][0]["content"].startswith("You grade"):
            return _server_reply(True)(request)
        return json.dumps({"tool_call": {"name": "line_status", "arguments": {}}})

    with FakeOpenAIServer(only_calls) as server:
        with pytest.raises(UserFailure) as err:
            asyncio.run(_conversation(server, {"judge": "user"}, data_dir))
    message = str(err.value)
    assert "LLM user" in message and "tool calls" in message and "\n" not in message
