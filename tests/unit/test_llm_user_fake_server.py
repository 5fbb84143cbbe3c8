"""The fake OpenAI-compatible server itself: wire shapes, latency, bounds, command line."""

from __future__ import annotations

import json
import statistics
import threading
import time
import urllib.error
import urllib.request

import pytest

from tests.fakes.fake_openai import FakeOpenAIServer, Fault, start_server_process

pytestmark = pytest.mark.timeout(60)


def post_chat(base_url: str, body: dict, timeout_s: float = 5.0) -> tuple[int, dict, dict]:
    request = urllib.request.Request(
        f"{base_url}/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            return response.status, json.loads(response.read()), dict(response.headers)
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read()), dict(err.headers)


def test_chat_completion_has_the_openai_shape_with_usage():
    with FakeOpenAIServer(lambda req: "two words") as server:
        status, body, _ = post_chat(
            server.base_url,
            {"model": "m", "messages": [{"role": "user", "content": "one two three"}]},
        )
    assert status == 200
    assert body["object"] == "chat.completion" and body["model"] == "m"
    assert body["choices"][0]["message"] == {"role": "assistant", "content": "two words"}
    assert body["choices"][0]["finish_reason"] == "stop"
    assert body["usage"] == {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}


def test_tool_call_replies_are_put_on_the_wire():
    def reply(_req):
        return {
            "content": None,
            "tool_calls": [{"function": {"name": "add", "arguments": {"a": 1}}}],
        }

    with FakeOpenAIServer(reply) as server:
        _, body, _ = post_chat(server.base_url, {"messages": []})
    choice = body["choices"][0]
    call = choice["message"]["tool_calls"][0]
    assert choice["finish_reason"] == "tool_calls"
    assert call["type"] == "function" and call["id"]
    assert call["function"] == {"name": "add", "arguments": '{"a": 1}'}


def test_models_route_and_unknown_route():
    with FakeOpenAIServer(model="served") as server:
        with urllib.request.urlopen(f"{server.base_url}/models", timeout=5) as response:
            models = json.loads(response.read())
        status, _, _ = post_chat(server.base_url.replace("/v1", "/v2"), {})
    assert [m["id"] for m in models["data"]] == ["served"]
    assert status == 404


def test_status_faults_and_retry_after_header():
    faults = [
        Fault("http429", retry_after_s=1.5),
        "http500",
        Fault("status", status=401, message="no"),
    ]
    with FakeOpenAIServer(faults=faults) as server:
        results = [post_chat(server.base_url, {"messages": []}) for _ in range(4)]
    assert [r[0] for r in results] == [429, 500, 401, 200]
    assert results[0][2]["Retry-After"] == "2" and results[0][2]["retry-after-ms"] == "1500"
    assert results[2][1]["error"]["message"] == "no"
    assert server.faults_injected == {"http429": 1, "http500": 1, "status": 1}


def test_lognormal_latency_has_the_requested_mean_and_is_seeded():
    def draws(seed: int) -> list[float]:
        server = FakeOpenAIServer(latency_ms=200, latency_dist="lognormal", seed=seed)
        return [server._sample_latency_s() for _ in range(4000)]

    first = draws(3)
    assert first == draws(3) and first != draws(4)
    assert statistics.fmean(first) == pytest.approx(0.2, rel=0.05)
    assert statistics.pstdev(first) > 0.05  # really spread, not a fixed delay


def test_latency_is_applied_and_in_flight_is_counted():
    with FakeOpenAIServer(latency_ms=150) as server:
        threads = [
            threading.Thread(target=post_chat, args=(server.base_url, {"messages": []}))
            for _ in range(5)
        ]
        started = time.monotonic()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        elapsed_s = time.monotonic() - started
    assert 0.15 <= elapsed_s < 1.0  # concurrent, each delayed
    assert server.total_requests == 5 and server.max_in_flight == 5 and server.in_flight == 0


def test_stop_releases_hung_requests_at_once():
    server = FakeOpenAIServer(faults=lambda i, b: "hang", hang_cap_s=30).start()
    caller = threading.Thread(target=lambda: _swallow(post_chat, server.base_url, {}, 30))
    caller.start()
    while server.in_flight == 0:
        time.sleep(0.01)
    started = time.monotonic()
    server.stop()
    caller.join(timeout=5)
    assert time.monotonic() - started < 2.0 and not caller.is_alive()


def test_hang_ends_at_its_cap():
    with FakeOpenAIServer(faults=lambda i, b: "hang", hang_cap_s=0.3) as server:
        started = time.monotonic()
        with pytest.raises(ConnectionError):
            post_chat(server.base_url, {}, timeout_s=10)
        assert time.monotonic() - started < 3.0


def _swallow(fn, *args):
    try:
        fn(*args)
    except Exception:
        pass


def test_command_line_serves_until_its_time_limit():
    args = ("--latency-ms", "20", "--reply", "hi there", "--max-seconds", "20")
    proc, base_url = start_server_process(*args)
    try:
        status, body, _ = post_chat(base_url, {"messages": []})
        assert status == 200 and body["choices"][0]["message"]["content"] == "hi there"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_unknown_fault_kind_is_refused():
    with pytest.raises(ValueError, match="unknown fault kind"):
        Fault("explode")
