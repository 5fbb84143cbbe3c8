"""The LLM user client against the fake OpenAI server on 127.0.0.1, with injected faults."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest

from mua.config.users import LLMUserConfig, ScriptedUserConfig
from mua.errors import RunFailure, UsageError
from mua.gym.api import UserFailure
from mua.llm.llm_client import ChatEndpoint, LLMClient, make_llm_client, parse_json_text
from tests.fakes.fake_openai import FakeOpenAIServer, Fault
from tests.fakes.fake_user import fake_user_config

pytestmark = pytest.mark.timeout(60)

KEY_ENV = "MUA_TEST_USER_KEY"
ASK = [{"role": "system", "content": "You are a user."}, {"role": "user", "content": "Hello?"}]


def json_reply(_request: dict) -> str:
    return '```json\n{"answer": "yes"}\n```'


def client_for(server: FakeOpenAIServer, **overrides) -> LLMClient:
    settings = {"api_key_env": KEY_ENV, "timeout_s": 0.5, "max_retries": 3, "backoff_s": 0.05}
    return LLMClient(fake_user_config(server, **{**settings, **overrides}))


def endpoint_at(base_url: str, **settings) -> ChatEndpoint:
    """A `ChatEndpoint` at `base_url` for model `m`, keyed by KEY_ENV, that never retries;
    `settings`: its timeout, backoff and concurrency."""
    return ChatEndpoint(
        base_url=base_url, model="m", api_key_env=KEY_ENV, max_retries=0, **settings
    )


def test_endpoint_for_config_reads_every_connection_setting():
    cfg = LLMUserConfig(
        kind="llm",
        api_key_env=KEY_ENV,
        timeout_s=7,
        max_retries=4,
        backoff_s=0.3,
        max_concurrency=5,
    )
    endpoint = ChatEndpoint.for_config(cfg, base_url="http://127.0.0.1:9/v1", model="m")
    got = (endpoint.api_key_env, endpoint.timeout_s, endpoint.max_retries, endpoint.backoff_s)
    assert got == (KEY_ENV, 7.0, 4, 0.3) and endpoint.max_concurrency == 5
    assert (endpoint.base_url, endpoint.model, endpoint.label) == (
        "http://127.0.0.1:9/v1",
        "m",
        "LLM user",
    )
    judge = ChatEndpoint.for_config(
        cfg, base_url="http://127.0.0.1:9/v1", model="m", max_concurrency=2, label="judge"
    )
    assert (judge.max_concurrency, judge.label, judge.max_retries) == (2, "judge", 4)


def request_gaps_s(server: FakeOpenAIServer) -> list[float]:
    times = [r["t"] for r in server.requests]
    return [b - a for a, b in zip(times[:-1], times[1:], strict=True)]


@pytest.mark.parametrize("kind", ["hang", "http500", "http429", "malformed", "garbage", "drop"])
def test_each_fault_is_retried_with_backoff_then_succeeds(kind):
    # a hung request hangs until the server stops: only the client's timeout can end it
    with FakeOpenAIServer(json_reply, faults=[kind, kind, None], hang_cap_s=None) as server:
        client = client_for(server)
        started = time.monotonic()
        value = asyncio.run(client.complete_json(ASK))
        elapsed_s = time.monotonic() - started
    assert value == {"answer": "yes"}
    assert server.total_requests == 3
    counts = client.counters
    assert counts["requests"] == 3 and counts["retries"] == 2 and counts["failures"] == 0
    # two backoffs: at least half of 0.05 s and half of 0.1 s (equal jitter)
    assert min(request_gaps_s(server)) >= 0.025
    if kind == "hang":
        assert counts["timeouts"] == 2
        assert elapsed_s >= 2 * 0.5  # each hung attempt waited out its timeout


def test_backoff_doubles_per_retry():
    with FakeOpenAIServer(json_reply, faults=["http500"] * 4) as server:
        client = client_for(server, backoff_s=0.1, max_retries=4)
        asyncio.run(client.complete_json(ASK))
    gaps = request_gaps_s(server)
    assert len(gaps) == 4
    for retry_number, gap_s in enumerate(gaps, start=1):
        base_s = 0.1 * 2 ** (retry_number - 1)
        assert base_s / 2 <= gap_s <= base_s + 0.15, (retry_number, gaps)
    assert gaps[3] > gaps[0] * 3  # 0.4..0.8 vs 0.05..0.1 s: growth, not a constant delay


def test_retry_after_of_a_429_is_honoured():
    faults = [Fault("http429", retry_after_s=0.4), None]
    with FakeOpenAIServer(json_reply, faults=faults) as server:
        client = client_for(server, backoff_s=0.01)
        asyncio.run(client.complete_json(ASK))
    assert client.counters["rate_limited"] == 1
    assert request_gaps_s(server)[0] >= 0.4


def test_spent_retries_raise_user_failure_naming_the_cause():
    with FakeOpenAIServer(json_reply, faults=lambda i, body: "http500") as server:
        client = client_for(server, max_retries=2, backoff_s=0.01)
        with pytest.raises(UserFailure) as info:
            asyncio.run(client.complete(ASK))
    message = str(info.value)
    assert "3 attempt(s)" in message and "HTTP 500" in message and server.base_url in message
    assert server.total_requests == 3
    assert client.counters["failures"] == 1 and client.counters["retries"] == 2


def test_malformed_json_forever_raises_user_failure():
    with FakeOpenAIServer(json_reply, faults=lambda i, body: "malformed") as server:
        client = client_for(server, max_retries=1, backoff_s=0.01)
        with pytest.raises(UserFailure, match="malformed reply: not valid JSON"):
            asyncio.run(client.complete_json(ASK))
    assert server.total_requests == 2


@pytest.mark.parametrize(
    "status, message, error, match",
    [  # a 4xx fails fast with the server's message; a 404 is about the URL or model, not the user
        (400, "context length exceeded", UserFailure, "HTTP 400.*context length exceeded"),
        (404, "model m not found", RunFailure, "model m not found.*check the URL and model"),
    ],
)
def test_a_4xx_fails_fast_with_the_server_message(status, message, error, match):
    fault = Fault("status", status=status, message=message)
    with FakeOpenAIServer(json_reply, faults=lambda i, body: fault) as server:
        client = client_for(server)
        with pytest.raises(error, match=match):
            asyncio.run(client.complete(ASK))
    assert server.total_requests == 1
    assert client.counters["retries"] == 0


def test_validation_failure_reasks_with_the_error():
    def reply(request: dict) -> str:
        reasked = any("could not be used" in m["content"] for m in request["messages"])
        return '{"answer": "yes"}' if reasked else '{"answer": "perhaps"}'

    def validate(value):
        if value.get("answer") not in ("yes", "no"):
            raise ValueError("answer must be yes or no")

    with FakeOpenAIServer(reply) as server:
        client = client_for(server)
        value = asyncio.run(client.complete_json(ASK, validate=validate))
    assert value == {"answer": "yes"}
    assert client.counters["retries"] == 1 and client.counters["malformed"] == 1
    reask = server.requests[1]["json"]["messages"]
    assert reask[:2] == ASK
    assert reask[2] == {"role": "assistant", "content": '{"answer": "perhaps"}'}
    assert "answer must be yes or no" in reask[3]["content"]


def ask_at_once(
    questions: int, max_concurrency: int, typed_replies: bool = False
) -> tuple[list[str], FakeOpenAIServer]:
    """`questions` asks gathered at once through one client against a 60 ms server; with
    `typed_replies` through the endpoint as the OpenAI agent policy uses it instead."""

    async def many(client: LLMClient) -> list[str]:
        asks = [[{"role": "user", "content": f"q{i}"}] for i in range(questions)]
        if typed_replies:
            endpoint = client.endpoint
            replies = await asyncio.gather(*(endpoint.chat(a) for a in asks))
            return [message.content for message, _ in replies]
        return await asyncio.gather(*(client.complete(a) for a in asks))

    with FakeOpenAIServer(latency_ms=60) as server:
        client = client_for(server, max_concurrency=max_concurrency, timeout_s=5)
        if typed_replies:
            client.endpoint = ChatEndpoint.for_config(
                client.cfg, base_url=server.base_url, model=client.cfg.model, typed_replies=True
            )
        return asyncio.run(many(client)), server


@pytest.mark.parametrize("typed_replies", [False, True])
def test_concurrency_limit_is_never_exceeded(typed_replies):
    replies, server = ask_at_once(16, max_concurrency=3, typed_replies=typed_replies)
    assert len(replies) == 16 and server.total_requests == 16
    assert server.max_in_flight == 3  # the cap is reached (requests overlap) and never passed
    assert server.connections <= 3


def test_a_cancelled_request_is_never_left_running():
    """Callers that give up (a trajectory's deadline) end their requests: the server sees every
    connection close, and the concurrency slots are free for the next requests at once."""

    async def scenario():
        ended: list[float] = []
        seen = asyncio.Event()
        opened = 0

        async def hold(reader, writer):  # reads a request and never answers
            nonlocal opened
            opened += 1
            await reader.readuntil(b"\r\n\r\n")
            if opened == 4:
                seen.set()
            await reader.read()  # until the client closes
            ended.append(time.monotonic())
            writer.close()

        server = await asyncio.start_server(hold, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        url = f"http://127.0.0.1:{port}/v1"
        endpoint = endpoint_at(url, timeout_s=60, backoff_s=0.01, max_concurrency=4)
        calls = [asyncio.create_task(endpoint.chat(ASK)) for _ in range(4)]
        await asyncio.wait_for(seen.wait(), 10)
        cancelled_at = time.monotonic()
        for call in calls:
            call.cancel()
        await asyncio.gather(*calls, return_exceptions=True)
        deadline = time.monotonic() + 5
        while len(ended) < 4 and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        free = endpoint._semaphore()._value
        await endpoint.aclose()
        server.close()
        return ended, cancelled_at, free

    ended, cancelled_at, free = asyncio.run(scenario())
    assert len(ended) == 4 and max(ended) - cancelled_at < 2
    assert free == 4


def test_cache_hits_skip_the_server(tmp_path):
    with FakeOpenAIServer(json_reply) as server:
        first = client_for(server, cache_dir=str(tmp_path))
        assert asyncio.run(first.complete_json(ASK)) == {"answer": "yes"}
        second = client_for(server, cache_dir=str(tmp_path))
        assert asyncio.run(second.complete_json(ASK)) == {"answer": "yes"}
        assert second.counters["cache_hits"] == 1 and second.counters["requests"] == 0
        assert server.total_requests == 1
        hotter = client_for(server, cache_dir=str(tmp_path), temperature=0.7)
        asyncio.run(hotter.complete_json(ASK))
        assert hotter.counters["cache_hits"] == 0 and server.total_requests == 2

        # a cached reply that fails this caller's validation is asked again, not returned
        def reject(value):
            raise ValueError("never good enough")

        with pytest.raises(UserFailure):
            asyncio.run(
                client_for(server, cache_dir=str(tmp_path), max_retries=0).complete_json(
                    ASK, validate=reject
                )
            )
        assert server.total_requests == 3
    entries = list(tmp_path.rglob("*.json"))
    assert len(entries) == 2 and not list(tmp_path.rglob(".tmp-*"))


def test_secret_key_reaches_the_server_but_no_log_or_error(monkeypatch, caplog, capfd):
    secret = "sk-planted-SECRET-0123456789"
    monkeypatch.setenv(KEY_ENV, secret)
    caplog.set_level(logging.DEBUG)
    echo = Fault("status", status=401, message=f"Incorrect API key provided: {secret}")
    faults = ["http500", "malformed", None, echo]
    with FakeOpenAIServer(json_reply, faults=faults) as server:
        client = client_for(server, backoff_s=0.01)
        asyncio.run(client.complete_json(ASK))
        with pytest.raises(RunFailure) as info:
            asyncio.run(client.complete(ASK))
    assert server.requests[0]["headers"]["authorization"] == f"Bearer {secret}"
    out, err = capfd.readouterr()
    assert caplog.records  # debug logging really was on
    for text in (caplog.text, out, err, str(info.value), repr(vars(client.endpoint))):
        assert secret not in text
    assert "***" in str(info.value) and KEY_ENV in str(info.value)


def test_unset_key_sends_a_placeholder_to_local_servers(monkeypatch):
    monkeypatch.delenv(KEY_ENV, raising=False)
    with FakeOpenAIServer() as server:
        asyncio.run(client_for(server).complete(ASK))
    assert server.requests[0]["headers"]["authorization"] == "Bearer EMPTY"


def test_make_llm_client_reads_env_defaults(monkeypatch):
    assert make_llm_client(ScriptedUserConfig()) is None
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.delenv(KEY_ENV, raising=False)
    with pytest.raises(UsageError, match=KEY_ENV):
        make_llm_client(LLMUserConfig(kind="llm", api_key_env=KEY_ENV))
    with FakeOpenAIServer() as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        monkeypatch.setenv("MULTITURN_MODEL_NAME", "env-model")
        client = make_llm_client(LLMUserConfig(kind="llm", api_key_env=KEY_ENV))
        assert asyncio.run(client.complete(ASK)).startswith("Thanks.")
    assert server.requests[0]["json"]["model"] == "env-model"
    assert server.requests[0]["json"]["max_tokens"] == 512


def test_one_client_survives_several_event_loops():
    with FakeOpenAIServer() as server:
        client = client_for(server)
        for _ in range(3):
            asyncio.run(client.complete(ASK))
    assert server.total_requests == 3


@pytest.mark.parametrize(
    "text, expected",
    [
        ('{"a": 1}', {"a": 1}),
        ('```json\n{"a": [1, 2]}\n```', {"a": [1, 2]}),
        ('Here you go:\n```\n{"a": 1}\n```\nbye', {"a": 1}),
        ('Verdict: {"score": 0.5} done', {"score": 0.5}),
        ("[1, 2]", [1, 2]),
    ],
)
def test_parse_json_text_accepts(text, expected):
    assert parse_json_text(text) == expected


@pytest.mark.parametrize("text", ["", "yes", '{"a": oops', "```json\n{\n```"])
def test_parse_json_text_rejects(text):
    with pytest.raises(ValueError, match="not valid JSON"):
        parse_json_text(text)


def test_client_keeps_connections_alive_across_requests():
    """One pooled connection per concurrent request, reused: not a new TCP connection per call."""

    async def ask_many(client):
        for _ in range(5):
            await client.complete(ASK)
        await asyncio.gather(*(client.complete(ASK) for _ in range(12)))
        await client.aclose()

    with FakeOpenAIServer(latency_ms=20) as server:
        client = client_for(server, max_concurrency=4)
        asyncio.run(ask_many(client))
    assert server.total_requests == 17
    assert 1 <= server.connections <= 4  # the concurrency cap bounds the pool in use


def test_credentials_in_the_url_go_as_basic_auth_and_never_into_errors(monkeypatch):
    import base64

    monkeypatch.setenv(KEY_ENV, "sk-not-sent-0123")
    with FakeOpenAIServer(faults=["http500", None, "http500", "http500"]) as server:
        url = server.base_url.replace("http://", "http://bob:pw-secret@")
        client = client_for(server, base_url=url, max_retries=1, backoff_s=0.01)
        assert asyncio.run(client.complete(ASK)).startswith("Thanks")
        with pytest.raises(UserFailure) as info:
            asyncio.run(client.complete(ASK))  # two 500s: retries spent
    sent = server.requests[0]["headers"]["authorization"]
    assert sent == "Basic " + base64.b64encode(b"bob:pw-secret").decode()
    assert "pw-secret" not in str(info.value) and f"127.0.0.1:{server.port}/v1" in str(info.value)


def test_the_proxy_comes_from_the_environment_once_per_endpoint(monkeypatch):
    from mua.http_session import proxy_for

    for name in ("http_proxy", "https_proxy", "all_proxy", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)
    assert proxy_for("https://api.openai.com/v1") is None
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.internal:3128")
    assert proxy_for("https://api.openai.com/v1") == "http://proxy.internal:3128"
    assert proxy_for("http://127.0.0.1:8000/v1") is None  # the proxy is for https only
    monkeypatch.setenv("NO_PROXY", "api.openai.com")
    assert proxy_for("https://api.openai.com/v1") is None
    endpoint = endpoint_at("https://example.org/v1", timeout_s=1, backoff_s=0.1, max_concurrency=1)
    assert endpoint._sessions.proxy == "http://proxy.internal:3128"
