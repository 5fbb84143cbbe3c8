"""An LLM user's or judge's tool calls through the fake OpenAI server: structured `tool_calls`
always, and calls written in the reply's text in a family's format when `user.tool_parser`
names it (a raw open model behind a plain completion server)."""

from __future__ import annotations

import asyncio

import pytest

from mua.config.users import LLMUserConfig
from mua.errors import UsageError
from mua.families import tool_calls  # noqa: F401  (hands the readers to the client, as a run does)
from mua.gym.api import UserFailure
from mua.llm.llm_client import LLMClient
from tests.fakes.fake_openai import FakeOpenAIServer
from tests.fakes.fake_user import fake_user_config
from tests.unit.family_templates import TOOLS

pytestmark = pytest.mark.timeout(60)

ASK = [{"role": "system", "content": "You are a customer."}, {"role": "user", "content": "Hi."}]
ARGS = {"tracking_no": "ZX99", "attempts": 2, "express": True, "legs": ["a", "b"]}
# the same call as each family writes it in text
WRITTEN = {
    "glm4_5": "Let me check.\n<tool_call>track_parcel\n<arg_key>tracking_no</arg_key>\n"
    "<arg_value>ZX99</arg_value>\n<arg_key>attempts</arg_key>\n<arg_value>2</arg_value>\n"
    "<arg_key>express</arg_key>\n<arg_value>true</arg_value>\n<arg_key>legs</arg_key>\n"
    '<arg_value>["a", "b"]</arg_value>\n</tool_call>',
    "qwen3_coder": "Let me check.\n<tool_call>\n<function=track_parcel>\n<parameter=tracking_no>\n"
    "ZX99\n</parameter>\n<parameter=attempts>\n2\n</parameter>\n<parameter=express>\ntrue\n"
    '</parameter>\n<parameter=legs>\n["a", "b"]\n</parameter>\n</function>\n</tool_call>',
    "hermes": 'Let me check.\n<tool_call>\n{"name": "track_parcel", "arguments": {"tracking_no": '
    '"ZX99", "attempts": 2, "express": true, "legs": ["a", "b"]}}\n</tool_call>',
}


def _client(server, **settings) -> LLMClient:
    return LLMClient(fake_user_config(server, **settings), label="LLM judge")


def _calls(reply) -> list[tuple[str, dict]]:
    return [(c["function"]["name"], c["function"]["arguments"]) for c in reply.tool_calls]


@pytest.mark.parametrize("family", sorted(WRITTEN))
def test_calls_written_as_text_are_read_with_the_named_family(family):
    with FakeOpenAIServer(lambda req: WRITTEN[family]) as server:
        reply = asyncio.run(_client(server, tool_parser=family).complete_tools(ASK, TOOLS))
        sent = server.requests[0]["json"]
    assert _calls(reply) == [("track_parcel", ARGS)]  # typed by the offered schema
    assert reply.text.strip() == "Let me check."
    assert reply.tool_calls[0]["id"]
    assert sent["tools"] == TOOLS


def test_without_a_parser_text_stays_text_and_structured_calls_are_read():
    with FakeOpenAIServer(lambda req: WRITTEN["glm4_5"]) as server:
        reply = asyncio.run(_client(server).complete_tools(ASK, TOOLS))
    assert reply.tool_calls == [] and reply.text == WRITTEN["glm4_5"]

    def structured(_req):
        return {
            "content": None,
            "tool_calls": [{"function": {"name": "track_parcel", "arguments": ARGS}}],
        }

    for parser in (None, "glm4_5"):
        with FakeOpenAIServer(structured) as server:
            reply = asyncio.run(_client(server, tool_parser=parser).complete_tools(ASK, TOOLS))
        assert _calls(reply) == [("track_parcel", ARGS)] and reply.text == ""


def test_a_broken_written_call_is_retried_then_a_user_failure():
    broken = "<tool_call>track_parcel\n<arg_key>tracking_no</arg_key>\n</tool_call>"
    replies = iter([broken, WRITTEN["glm4_5"]])
    with FakeOpenAIServer(lambda req: next(replies)) as server:
        client = _client(server, tool_parser="glm4_5")
        reply = asyncio.run(client.complete_tools(ASK, TOOLS))
    assert _calls(reply) == [("track_parcel", ARGS)]
    assert client.counters["malformed"] == 1 and server.total_requests == 2

    with FakeOpenAIServer(lambda req: broken) as server:
        client = _client(server, tool_parser="glm4_5", max_retries=1)
        with pytest.raises(UserFailure, match="unreadable glm4_5 tool call"):
            asyncio.run(client.complete_tools(ASK, TOOLS))
    assert server.total_requests == 2


def test_cached_tool_replies_are_served_without_a_request(tmp_path):
    with FakeOpenAIServer(lambda req: WRITTEN["glm4_5"]) as server:
        first = asyncio.run(
            _client(server, tool_parser="glm4_5", cache_dir=str(tmp_path)).complete_tools(
                ASK, TOOLS
            )
        )
        again = _client(server, tool_parser="glm4_5", cache_dir=str(tmp_path))
        second = asyncio.run(again.complete_tools(ASK, TOOLS))
        assert server.total_requests == 1
        asyncio.run(again.complete_tools(ASK, TOOLS[:1]))  # other tools: another request
        assert server.total_requests == 2
    assert second == first and again.counters["cache_hits"] == 1


def test_an_unknown_parser_name_is_refused_naming_the_choices():
    from mua.config import load_recipe

    with pytest.raises((UsageError, ValueError), match="glm4_5"):
        load_recipe(None, ["user.kind=llm", "user.tool_parser=glm5"], verb="eval")
    assert LLMUserConfig(kind="llm").tool_parser is None
