"""`mua serve`'s HTTP listener (aiohttp's server), spoken to over raw sockets: keep-alive,
closing, bad requests, chunked bodies, `Expect: 100-continue`, and concurrent requests reaching the engine together without blocking
the other calls."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest

from mua.engines.engine_contract import GenerationResult
from mua.serve import MuaServer

GENERATE = {"input_ids": [5, 6, 7], "sampling_params": {"max_new_tokens": 2, "temperature": 0}}


class _Engine:
    """Answers every prompt with its reversed ids; `hold` makes generate wait until `wanted`
    requests are in flight at once (or `hold_s` passed), recording the most seen together."""

    def __init__(self, wanted: int = 1, hold_s: float = 0.0):
        self.wanted, self.hold_s = wanted, hold_s
        self.in_flight = self.most_together = self.flushes = 0
        self.fail = self.released = False

    async def generate(self, request):
        if self.fail:
            raise RuntimeError("the model fell over")
        self.in_flight += 1
        self.most_together = max(self.most_together, self.in_flight)
        self.released = self.released or self.in_flight >= self.wanted
        deadline = asyncio.get_running_loop().time() + self.hold_s
        while not self.released and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.01)
        self.in_flight -= 1
        ids = list(reversed(request.prompt_ids))[: request.sampling.max_new_tokens]
        return GenerationResult(token_ids=ids, logprobs=[-0.5] * len(ids), finish_reason="length")

    async def flush_cache(self):
        self.flushes += 1


@pytest.fixture
def serve():
    servers = []

    def start(engine) -> MuaServer:
        servers.append(MuaServer(engine).start())
        return servers[-1]

    yield start
    for srv in servers:
        srv.stop()


def _request(method: str, path: str, body: bytes = b"", extra: str = "") -> bytes:
    head = f"{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n{extra}\r\n"
    return head.encode() + body


def _read_answer(sock: socket.socket) -> tuple[int, dict, bytes]:
    """(status, headers, body) of one answer read from `sock`."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"the server closed the connection mid-answer: {data!r}"
        data += chunk
    head, rest = data.split(b"\r\n\r\n", 1)
    lines = head.decode().split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    length = int(headers["content-length"])
    while len(rest) < length:
        rest += sock.recv(65536)
    return int(lines[0].split()[1]), headers, rest[:length]


def _closed(sock: socket.socket) -> bool:
    sock.settimeout(10)
    return sock.recv(1) == b""


def _connect(srv: MuaServer) -> socket.socket:
    return socket.create_connection(("127.0.0.1", srv.port), timeout=30)


def test_one_connection_carries_many_requests_until_the_client_asks_to_close(serve):
    srv = serve(_Engine())
    with _connect(srv) as sock:
        for _ in range(3):
            sock.sendall(_request("POST", "/generate", json.dumps(GENERATE).encode()))
            status, headers, body = _read_answer(sock)
            assert status == 200 and "connection" not in headers
            assert json.loads(body)["output_ids"] == [7, 6]
        sock.sendall(_request("GET", "/health", extra="Connection: close\r\n"))
        status, headers, _ = _read_answer(sock)
        assert status == 200 and headers["connection"] == "close"
        assert _closed(sock)


def test_bad_requests_get_400_with_the_reason(serve):
    srv = serve(_Engine())
    with _connect(srv) as sock:  # a body that is not JSON: 400, and the connection goes on
        sock.sendall(_request("POST", "/generate", b"{not json"))
        status, _, body = _read_answer(sock)
        assert status == 400 and "not JSON" in json.loads(body)["error"]["message"]
        sock.sendall(_request("POST", "/generate", json.dumps({"input_ids": []}).encode()))
        status, _, body = _read_answer(sock)
        assert status == 400 and "input_ids" in json.loads(body)["error"]["message"]
    with _connect(srv) as sock:  # not HTTP: 400, then the server closes
        sock.sendall(b"HELLO\r\n\r\n")
        status, _, _ = _read_answer(sock)
        assert status == 400
        assert _closed(sock)


def test_a_chunked_request_body_is_read(serve):
    srv = serve(_Engine())
    body = json.dumps(GENERATE).encode()
    chunked = b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)
    with _connect(srv) as sock:
        sock.sendall(
            b"POST /generate HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked
        )
        status, _, answer = _read_answer(sock)
        assert status == 200 and json.loads(answer)["output_ids"] == [7, 6]


def test_status_codes_of_unknown_paths_wrong_methods_and_engine_failures(serve):
    engine = _Engine()
    srv = serve(engine)
    with _connect(srv) as sock:
        sock.sendall(_request("GET", "/nothing"))
        assert _read_answer(sock)[0] == 404
        sock.sendall(_request("GET", "/generate"))
        assert _read_answer(sock)[0] == 405
        engine.fail = True
        sock.sendall(_request("POST", "/generate", json.dumps(GENERATE).encode()))
        status, _, body = _read_answer(sock)
        assert status == 500 and "the model fell over" in json.loads(body)["error"]["message"]


def test_expect_100_continue_is_answered_before_the_body(serve):
    srv = serve(_Engine())
    body = json.dumps(GENERATE).encode()
    with _connect(srv) as sock:
        head = _request("POST", "/generate", body, "Expect: 100-continue\r\n")[: -len(body)]
        sock.sendall(head)  # the head alone: the body follows the interim answer
        interim = sock.recv(64)
        assert interim.startswith(b"HTTP/1.1 100 Continue\r\n\r\n")
        sock.sendall(body)
        status, _, answer = _read_answer(sock)
        assert status == 200 and json.loads(answer)["output_ids"] == [7, 6]


def test_concurrent_requests_reach_the_engine_together_and_other_calls_are_not_blocked(serve):
    """Eight clients at once: the engine sees all eight in flight together (it batches them),
    and a cache flush sent while they wait is answered meanwhile."""
    engine = _Engine(wanted=8, hold_s=20)
    srv = serve(engine)

    def one(_):
        req = urllib.request.Request(
            srv.url + "/generate", data=json.dumps(GENERATE).encode(), method="POST"
        )
        with urllib.request.urlopen(req, timeout=60) as resp:
            return json.loads(resp.read())["output_ids"]

    flushed = threading.Event()

    def flush_while_waiting():
        with urllib.request.urlopen(srv.url + "/flush_cache", timeout=30) as resp:
            assert json.loads(resp.read())["success"]
            flushed.set()

    with ThreadPoolExecutor(max_workers=8) as pool:
        answers = pool.map(one, range(7))  # seven wait for an eighth
        deadline = time.monotonic() + 30
        while engine.in_flight < 7 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert engine.in_flight == 7
        flusher = threading.Thread(target=flush_while_waiting)
        flusher.start()
        flusher.join(timeout=30)
        assert flushed.is_set() and engine.flushes == 1 and engine.in_flight == 7
        assert one(7) == [7, 6]
        assert list(answers) == [[7, 6]] * 7
    assert engine.most_together == 8
