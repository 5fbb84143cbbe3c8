"""A simulated user whose replies are not usable text, against the fake OpenAI server: `content:
null`, tool calls nobody offered, a 10 MB reply, a redirect. Each is retried and then a user
failure (never text handed to the agent, never scored); a user that never works stops the run
before it starts, with one line. Also: deadlines count from when a request leaves the queue,
and Retry-After in its date form."""

from __future__ import annotations

import asyncio
import email.utils
import time

import pytest

from mua.config.users import LLMUserConfig
from mua.errors import RunFailure
from mua.gym.api import UserFailure
from mua.llm.chat_endpoint import retry_after_s
from mua.llm.llm_client import LLMClient, preflight_user
from tests.conftest import tau_expert_eval, tau_expert_evaluation
from tests.fakes.fake_openai import FakeOpenAIServer, Fault
from tests.fakes.fake_user import fake_user_config

pytestmark = pytest.mark.timeout(120)

ASK = [{"role": "user", "content": "Hello?"}]
TEN_MB = "word " * (2 * 1024 * 1024)
UNUSABLE = {
    "null content": ({"content": None}, "its content is null, not text"),
    "tool calls": (
        {"content": None, "tool_calls": [{"name": "lookup", "arguments": {"q": "x"}}]},
        "it holds tool calls, and no tools were offered",
    ),
    "10 MB": (TEN_MB, "over the 2097152-byte limit"),
}


def user_cfg(server: FakeOpenAIServer, **overrides) -> LLMUserConfig:
    return fake_user_config(server, **{"timeout_s": 5, **overrides})


@pytest.mark.parametrize("case", sorted(UNUSABLE))
def test_an_unusable_reply_is_retried_then_a_user_failure(case):
    reply, reason = UNUSABLE[case]
    with FakeOpenAIServer(lambda _request: reply) as server:
        client = LLMClient(user_cfg(server))
        with pytest.raises(UserFailure, match="3 attempt") as info:
            asyncio.run(client.complete(ASK))
    assert reason in str(info.value) and server.total_requests == 3
    assert client.counters["malformed"] == 3 and client.counters["failures"] == 1


def test_a_reply_far_over_max_tokens_is_not_usable():
    with FakeOpenAIServer(lambda _request: "word " * 5000) as server:  # 25 000 characters
        client = LLMClient(user_cfg(server, max_tokens=64))
        with pytest.raises(UserFailure, match="25000 characters of text for max_tokens=64"):
            asyncio.run(client.complete(ASK))


def test_one_bad_reply_is_retried_and_the_next_one_used():
    replies = iter([{"content": None}, "Fine, thanks."])
    with FakeOpenAIServer(lambda _request: next(replies)) as server:
        client = LLMClient(user_cfg(server))
        assert asyncio.run(client.complete(ASK)) == "Fine, thanks."
    assert client.counters["retries"] == 1


def test_tool_calls_that_were_asked_for_come_back():
    """A user with tools of its own (the tau2 user) asks with `tools` and gets the calls."""
    call = {"name": "toggle_airplane_mode", "arguments": {"on": False}}
    with FakeOpenAIServer(lambda _request: {"content": None, "tool_calls": [call]}) as server:
        client = LLMClient(user_cfg(server))
        tools = [{"type": "function", "function": {"name": "toggle_airplane_mode"}}]
        message, _ = asyncio.run(client.endpoint.chat(ASK, tools=tools, max_tokens=64))
    assert message.content is None
    assert message.tool_calls[0].function.name == "toggle_airplane_mode"
    assert message.tool_calls[0].function.arguments == '{"on": false}'
    assert server.requests[0]["json"]["tools"] == tools


@pytest.mark.parametrize("case", sorted(UNUSABLE))
def test_a_user_that_never_answers_usably_stops_the_run_in_one_line(case):
    reply, reason = UNUSABLE[case]
    with FakeOpenAIServer(lambda _request: reply) as server:
        with pytest.raises(RunFailure) as info:
            preflight_user(user_cfg(server))
    message = str(info.value)
    assert "\n" not in message and reason in message and "nothing was run" in message


def test_a_redirect_is_reported_as_one_with_the_url_to_set():
    moved = "https://llm.example.com/v1/chat/completions"
    with FakeOpenAIServer(faults=lambda _i, _body: Fault("redirect", location=moved)) as server:
        with pytest.raises(RunFailure) as info:
            preflight_user(user_cfg(server))
        requests = server.total_requests
    message = str(info.value)
    assert (
        "answered a redirect (HTTP 307) to https://llm.example.com/v1/chat/completions" in message
    )
    assert "set user.base_url to https://llm.example.com/v1" in message
    assert "JSON" not in message and "\n" not in message and requests == 1


def test_an_eval_whose_user_breaks_after_the_preflight_masks_every_trajectory(tmp_path):
    """10 MB user replies mid-run: the trajectories end `user_failure` (excluded from the
    scores), not the agent's `length` failure scored 0."""

    def reply(request: dict) -> str:
        return "OK" if request["messages"][-1]["content"] == "Reply with OK." else TEN_MB

    with FakeOpenAIServer(reply) as server:
        retry_once = ["user.max_retries=1", "user.backoff_s=0.01"]
        summaries = tau_expert_evaluation(server.base_url, tmp_path, retry_once, track=False)
    tau = summaries["tau"]
    assert tau["terminations"] == {"user_failure": 2} and tau["excluded"] == 2
    assert tau["user_failures"] == 2


def test_the_deadline_of_an_attempt_starts_when_it_leaves_the_queue():
    """One request at a time, each taking 0.4 s, with a 0.7 s deadline: the third waits 0.8 s
    in the queue and still succeeds, with no timeout counted."""
    with FakeOpenAIServer(latency_ms=400) as server:
        client = LLMClient(user_cfg(server, max_concurrency=1, timeout_s=0.7, max_retries=0))

        async def three():
            return await asyncio.gather(*(client.complete(ASK) for _ in range(3)))

        assert len(asyncio.run(three())) == 3
    assert client.counters["timeouts"] == 0 and server.max_in_flight == 1


def test_retry_after_as_seconds_milliseconds_or_a_date():
    assert retry_after_s({"retry-after": "2"}) == 2.0
    assert retry_after_s({"retry-after-ms": "250", "retry-after": "9"}) == 0.25
    when = email.utils.formatdate(time.time() + 5, usegmt=True)
    assert 3.5 <= retry_after_s({"retry-after": when}) <= 5.0
    assert retry_after_s({}) is None


def test_mua_eval_with_a_user_that_answers_null_exits_1_in_one_line(tmp_path, mua_cli):
    out = tmp_path / "eval"
    with FakeOpenAIServer(lambda _request: {"content": None}) as server:
        code, _, err = mua_cli(
            *tau_expert_eval(out),
            f"user.base_url={server.base_url}",
            "user.max_retries=1",
            "user.backoff_s=0.01",
        )
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 1 and len(lines) == 1 and "Traceback" not in err, err[-2000:]
    assert "its content is null, not text" in lines[0] and "nothing was run" in lines[0]
    assert not (out / "results.jsonl").exists()
