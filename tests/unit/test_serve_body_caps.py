"""`mua serve` caps each route's request body and answers 413 past it, without reading the rest:
a declared Content-Length over the cap is refused before its body, a chunked body when it
passes the cap; the connection then closes."""

from __future__ import annotations

import json

from mua.serve.http_front import body_limit
from tests.unit.test_serve_http import GENERATE, _closed, _connect, _Engine, _read_answer, serve

__all__ = ["serve"]  # the fixture, shared with the listener's other tests
MiB = 1 << 20


def test_each_route_has_a_cap_that_fits_its_work():
    assert body_limit("/v1/chat/completions") <= 64 * MiB
    assert body_limit("/generate") <= 64 * MiB
    assert body_limit("/health") <= MiB and body_limit("/no/such/route") <= MiB
    # weight pushes carry tensor handles for a whole model: more room, still bounded
    assert 64 * MiB < body_limit("/update_weights_from_tensor") < (1 << 40)


def test_a_declared_length_over_the_cap_is_refused_before_the_body(serve):
    srv = serve(_Engine())
    with _connect(srv) as sock:
        sock.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n"
            % (body_limit("/v1/chat/completions") + 1)
        )
        status, _, body = _read_answer(sock)
        assert status == 413 and "body" in json.loads(body)["error"]["message"]
        assert _closed(sock)


def test_a_chunked_body_past_the_cap_is_refused_and_not_read_in_full(serve):
    srv = serve(_Engine())
    cap = body_limit("/v1/chat/completions")
    chunk = b"x" * MiB
    sent = 0
    with _connect(srv) as sock:
        sock.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
        )
        try:
            while sent < 4 * cap:
                sock.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                sent += len(chunk)
        except (BrokenPipeError, ConnectionResetError):
            pass
        sock.settimeout(30)
        try:
            status, _, _ = _read_answer(sock)
        except (TimeoutError, ConnectionResetError):
            status = None  # a reset before the answer was read: the server stopped reading
        assert status in (413, None)
    assert sent < 4 * cap  # the server stopped reading near the cap, not at the end
    with _connect(srv) as sock:  # and it goes on serving
        body = json.dumps(GENERATE).encode()
        sock.sendall(
            b"POST /generate HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s"
            % (len(body), body)
        )
        assert _read_answer(sock)[0] == 200
