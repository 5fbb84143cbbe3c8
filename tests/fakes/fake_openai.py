"""A small OpenAI-compatible HTTP server on 127.0.0.1 for tests and benchmarks.

It answers `POST /v1/chat/completions` (the OpenAI response shape, with `usage`) and
`GET /v1/models`. What the assistant says comes from a Python handler `reply(request_json)`
returning the content string (or a message dict with `tool_calls`). Per request it can inject
faults (a hang, HTTP 500, HTTP 429 with Retry-After, malformed JSON content, a non-JSON body, a
dropped connection, a redirect) and latency (fixed, or log-normal with a given mean, seeded). It counts
requests, TCP connections (HTTP/1.1 keep-alive, as real servers) and the most requests it had in
flight at once.

It runs in a background thread (stdlib `ThreadingHTTPServer`, one thread per connection) and is
bounded: a hung request ends at `hang_cap_s` or when the server stops, whichever comes first
(`hang_cap_s=None`: only when the server stops, for a user that never answers).
It does not implement streaming, embeddings, or any model: token counts in `usage` are word
counts, good enough for shape checks.

Run standalone for benchmarks, from the repository root:
`python -m tests.fakes.fake_openai --port 8000 --latency-ms 200`, or in a child process on a free
port with `start_server_process(*args)`. A test double: not shipped in the `mua` package.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

FAULT_KINDS = ("hang", "http500", "http429", "status", "malformed", "garbage", "drop", "redirect")
# sigma of the log-normal latency (of the underlying normal); the mean is set per server
LATENCY_SIGMA = 0.5

ReplyHandler = Callable[[dict], "str | dict"]
FaultSource = Callable[[int, dict], "Fault | str | None"] | Sequence["Fault | str | None"] | None


@dataclass(frozen=True)
class Fault:
    """One injected fault. `kind` is one of FAULT_KINDS.

    hang: hold the request without answering until `hang_cap_s` (or server stop), then drop it.
    http500 / http429: answer with that status; 429 carries `retry_after_s` as `Retry-After`.
    status: answer with `status` and the error `message` (e.g. 400, or 401 echoing a key).
    malformed: HTTP 200 whose assistant content is not valid JSON.
    garbage: HTTP 200 whose body is not JSON at all.
    drop: close the connection without answering.
    redirect: answer `status` (307 unless a 3xx is given) with `Location: location`, as a proxy
    or a server moved to https does.
    """

    kind: str
    retry_after_s: float = 0.1
    status: int = 400
    message: str = "injected error"
    location: str = ""

    def __post_init__(self) -> None:
        if self.kind not in FAULT_KINDS:
            raise ValueError(f"unknown fault kind {self.kind!r}; expected one of {FAULT_KINDS}")


def default_reply(request: dict) -> str:
    """A canned simulated-user line; deterministic."""
    turns = sum(1 for m in request.get("messages", []) if m.get("role") == "user")
    return f"Thanks. Please continue (turn {turns})."


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 256  # benches open dozens of connections at once


class FakeOpenAIServer:
    """Context manager: `with FakeOpenAIServer(reply) as srv: use(srv.base_url)`."""

    def __init__(
        self,
        reply: ReplyHandler | None = None,
        *,
        faults: FaultSource = None,
        latency_ms: float = 0.0,
        latency_dist: str = "fixed",
        latency_sigma: float = LATENCY_SIGMA,
        seed: int = 0,
        hang_cap_s: float | None = 10.0,
        model: str = "fake-model",
        host: str = "127.0.0.1",
        port: int = 0,
        max_logged_requests: int = 10_000,
    ) -> None:
        if latency_dist not in ("fixed", "lognormal"):
            raise ValueError("latency_dist must be 'fixed' or 'lognormal'")
        self.reply = reply or default_reply
        self.faults = faults
        self.latency_ms = float(latency_ms)
        self.latency_dist = latency_dist
        self.latency_sigma = float(latency_sigma)
        self.hang_cap_s = None if hang_cap_s is None else float(hang_cap_s)
        self.model = model
        self._host, self._port = host, port
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._server: _Server | None = None
        self._bound_port: int | None = None
        self._thread: threading.Thread | None = None
        self._max_logged = max_logged_requests
        self.total_requests = 0  # chat completions received (faulty ones included)
        self.in_flight = 0
        self.max_in_flight = 0
        self.connections = 0  # TCP connections accepted (clients that keep them alive reuse them)
        self.faults_injected: dict[str, int] = {}
        # per chat request: {"json": body, "headers": {lowercased: value}, "t": monotonic seconds}
        self.requests: list[dict] = []

    # -- lifecycle ---------------------------------------------------------------------------
    @property
    def port(self) -> int:
        if self._bound_port is None:
            raise RuntimeError("server not started")
        return self._bound_port

    @property
    def base_url(self) -> str:
        return f"http://{self._host}:{self.port}/v1"

    def start(self) -> FakeOpenAIServer:
        handler = _make_handler(self)
        self._server = _Server((self._host, self._port), handler)
        self._bound_port = self._server.server_address[1]  # kept after stop, for messages
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()  # releases hung and sleeping handlers first
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._server = None
        # handler threads end on their own after their answer is written: wait for them, so
        # counts read after stop() are final (a client can return before its handler has ended)
        deadline = time.monotonic() + 2.0
        while self.in_flight and time.monotonic() < deadline:
            time.sleep(0.005)

    def __enter__(self) -> FakeOpenAIServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- per-request decisions ---------------------------------------------------------------
    def _begin(self, body: dict, headers: dict) -> tuple[int, Fault | None, float]:
        with self._lock:
            index = self.total_requests
            self.total_requests += 1
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            if len(self.requests) < self._max_logged:
                lowered = {k.lower(): v for k, v in headers.items()}
                self.requests.append({"json": body, "headers": lowered, "t": time.monotonic()})
            delay_s = self._sample_latency_s()
        fault = self._fault_for(index, body)
        if fault is not None:
            with self._lock:
                self.faults_injected[fault.kind] = self.faults_injected.get(fault.kind, 0) + 1
        return index, fault, delay_s

    def _end(self) -> None:
        with self._lock:
            self.in_flight -= 1

    def _sample_latency_s(self) -> float:
        if self.latency_ms <= 0:
            return 0.0
        mean_s = self.latency_ms / 1000.0
        if self.latency_dist == "fixed":
            return mean_s
        # log-normal with E[X] = mean_s: mu = ln(mean) - sigma^2 / 2
        mu = math.log(mean_s) - self.latency_sigma**2 / 2
        return self._rng.lognormvariate(mu, self.latency_sigma)

    def _fault_for(self, index: int, body: dict) -> Fault | None:
        if self.faults is None:
            return None
        if callable(self.faults):
            fault = self.faults(index, body)
        else:
            fault = self.faults[index] if index < len(self.faults) else None
        if isinstance(fault, str):
            fault = Fault(fault)
        return fault

    def wait(self, seconds: float | None) -> bool:
        """Sleep up to `seconds` (None: until the server stops); True when it is stopping."""
        return self._stop.wait(seconds)


def _completion_body(server: FakeOpenAIServer, request: dict, reply: str | dict) -> dict:
    message = {"role": "assistant", "content": reply} if isinstance(reply, str) else dict(reply)
    message.setdefault("role", "assistant")
    message.setdefault("content", None)
    finish = "stop"
    if message.get("tool_calls"):
        message["tool_calls"] = [_wire_tool_call(c, i) for i, c in enumerate(message["tool_calls"])]
        finish = "tool_calls"
    prompt_words = sum(
        len(str(m.get("content") or "").split()) for m in request.get("messages", [])
    )
    completion_words = len(str(message.get("content") or "").split())
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex[:12]}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": request.get("model") or server.model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
        "usage": {
            "prompt_tokens": prompt_words,
            "completion_tokens": completion_words,
            "total_tokens": prompt_words + completion_words,
        },
    }


def _wire_tool_call(call: dict, index: int) -> dict:
    fn = dict(call.get("function") or call)
    args = fn.get("arguments", {})
    return {
        "id": call.get("id") or f"call_{index}_{uuid.uuid4().hex[:8]}",
        "type": "function",
        "function": {
            "name": fn.get("name", ""),
            "arguments": args if isinstance(args, str) else json.dumps(args),
        },
    }


def _make_handler(server: FakeOpenAIServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        # keep-alive like real servers, so clients can reuse connections; an idle connection
        # ends after `timeout` seconds, and none is served once the server stops
        protocol_version = "HTTP/1.1"
        timeout = 30
        # headers and body are two writes: without this, Nagle's algorithm holds the body of a
        # kept-alive connection's answer until the client's delayed ACK
        disable_nagle_algorithm = True

        def setup(self) -> None:
            super().setup()
            with server._lock:
                server.connections += 1

        def log_message(self, format: str, *args: Any) -> None:  # quiet; never log headers
            return

        def _send_json(self, status: int, payload: Any, headers: dict | None = None) -> None:
            data = json.dumps(payload).encode()
            self._send_raw(status, data, headers)

        def _send_raw(self, status: int, data: bytes, headers: dict | None = None) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if self.path.rstrip("/") in ("/v1/models", "/models"):
                model = {"id": server.model, "object": "model", "created": 0, "owned_by": "mua"}
                self._send_json(200, {"object": "list", "data": [model]})
            else:
                self._send_json(404, {"error": {"message": f"no route {self.path}"}})

        def do_POST(self) -> None:
            if server._stop.is_set():
                self.close_connection = True
                return
            if self.path.rstrip("/") not in ("/v1/chat/completions", "/chat/completions"):
                self._send_json(404, {"error": {"message": f"no route {self.path}"}})
                return
            length = int(self.headers.get("Content-Length") or 0)
            try:
                body = json.loads(self.rfile.read(length) or b"{}")
            except json.JSONDecodeError:
                self._send_json(400, {"error": {"message": "request body is not JSON"}})
                return
            _, fault, delay_s = server._begin(body, dict(self.headers.items()))
            try:
                if delay_s and server.wait(delay_s):
                    return
                self._answer(body, fault)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (its timeout); nothing to answer
            finally:
                server._end()

        def _answer(self, body: dict, fault: Fault | None) -> None:
            kind = fault.kind if fault else None
            if kind in ("hang", "drop"):
                if kind == "hang":
                    server.wait(server.hang_cap_s)
                self.close_connection = True
                return
            if kind == "http500":
                self._send_json(500, {"error": {"message": "injected server error"}})
            elif kind == "http429":
                wait_s = max(0.0, fault.retry_after_s)
                headers = {
                    "Retry-After": str(max(1, math.ceil(wait_s))),
                    "retry-after-ms": str(int(wait_s * 1000)),
                }
                self._send_json(429, {"error": {"message": "injected rate limit"}}, headers)
            elif kind == "redirect":
                status = fault.status if 300 <= fault.status < 400 else 307
                self._send_json(status, {}, {"Location": fault.location})
            elif kind == "status":
                self._send_json(fault.status, {"error": {"message": fault.message}})
            elif kind == "garbage":
                self._send_raw(200, b"<html>not json</html>")
            elif kind == "malformed":
                self._send_json(200, _completion_body(server, body, 'Sure! {"answer": oops'))
            else:
                self._send_json(200, _completion_body(server, body, server.reply(body)))

    return Handler


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Local fake OpenAI-compatible server.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--latency-ms", type=float, default=0.0)
    parser.add_argument("--latency-dist", choices=["fixed", "lognormal"], default="lognormal")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--reply", default=None, help="Fixed assistant content (default: canned).")
    parser.add_argument("--max-seconds", type=float, default=3600.0, help="Stop after this long.")
    args = parser.parse_args(argv)
    reply = (lambda _req: args.reply) if args.reply is not None else None
    server = FakeOpenAIServer(
        reply,
        latency_ms=args.latency_ms,
        latency_dist=args.latency_dist,
        seed=args.seed,
        host=args.host,
        port=args.port,
    )
    with server:
        print(f"serving {server.base_url} (stops after {args.max_seconds:.0f} s)", flush=True)
        try:
            server.wait(args.max_seconds)
        except KeyboardInterrupt:
            pass


def start_server_process(*args: str) -> tuple[subprocess.Popen, str]:
    """This command line in a child process on a free port, with `args` added: (the process, its
    base URL). The caller stops the process; a RuntimeError when it does not start."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.fakes.fake_openai", "--port", "0", *args],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        cwd=Path(__file__).resolve().parents[2],  # `tests.fakes` is importable from the repo root
    )
    line = proc.stdout.readline()
    if not line.startswith("serving "):
        proc.kill()
        raise RuntimeError(f"fake user server did not start: {line!r}")
    return proc, line.split()[1]


if __name__ == "__main__":
    main()
