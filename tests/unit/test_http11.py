"""mua's keep-alive HTTP/1.1 client against a scripted server on 127.0.0.1: connection reuse,
body framings, servers that close connections, cancellation, and when it does not apply."""

from __future__ import annotations

import asyncio
import json

import pytest

from mua.rollout import http11

pytestmark = pytest.mark.timeout(30)


class ScriptedServer:
    """Answers each request with `answer(request_number_on_connection, body)`: raw bytes to
    send, (bytes, "close") to send them and close, or None to close the connection without
    answering. Counts connections."""

    def __init__(self, answer) -> None:
        self.answer = answer
        self.connections = 0
        self.requests: list[tuple[str, dict, bytes]] = []
        self.server: asyncio.base_events.Server | None = None

    async def __aenter__(self) -> ScriptedServer:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *exc) -> None:
        self.server.close()
        await self.server.wait_closed()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}/v1"

    async def _serve(self, reader, writer) -> None:
        self.connections += 1
        served = 0
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except asyncio.IncompleteReadError:
                    return
                lines = head.decode("latin-1").split("\r\n")
                headers = {}
                for line in lines[1:]:
                    if ":" in line:
                        name, value = line.split(":", 1)
                        headers[name.strip().lower()] = value.strip()
                body = await reader.readexactly(int(headers.get("content-length", 0)))
                self.requests.append((lines[0], headers, body))
                served += 1
                data = await self.answer(served, body)
                if data is None:
                    return
                data, then = data if isinstance(data, tuple) else (data, "")
                writer.write(data)
                await writer.drain()
                if then == "close":
                    return
        finally:
            writer.close()


async def until(condition, limit_s: float = 30.0) -> None:
    """Wait for `condition()` (polled), so a loaded machine only makes the test slower."""
    loop = asyncio.get_running_loop()
    end = loop.time() + limit_s
    while not condition():
        assert loop.time() < end, "condition not reached"
        await asyncio.sleep(0.01)


def framed(payload: dict, extra: str = "") -> bytes:
    body = json.dumps(payload).encode()
    head = f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n"
    return (head + extra + "\r\n").encode() + body


async def echo(_served: int, body: bytes) -> bytes:
    return framed({"echo": json.loads(body or b"null")})


def test_sequential_requests_share_one_connection_and_the_request_is_well_formed():
    async def go():
        async with ScriptedServer(echo) as server:
            pool = http11.ConnectionPool(server.url)
            answers = []
            for i in range(5):
                body = http11.dumps({"i": i, "text": "héllo"})
                response = await pool.request("POST", "/chat/completions", body, {"X-Key": "k"})
                answers.append(response.json()["echo"]["i"])
            await pool.aclose()
            return answers, server

    answers, server = asyncio.run(go())
    assert answers == [0, 1, 2, 3, 4]
    assert server.connections == 1
    line, headers, body = server.requests[0]
    assert line == "POST /v1/chat/completions HTTP/1.1"
    assert headers["host"].startswith("127.0.0.1:") and headers["x-key"] == "k"
    assert body == '{"i":0,"text":"héllo"}'.encode()  # compact UTF-8, as the OpenAI SDK sends


def test_concurrent_requests_open_one_connection_each_and_then_reuse_them():
    async def slow(_served, body):
        await asyncio.sleep(0.05)
        return framed({"ok": True})

    async def go():
        async with ScriptedServer(slow) as server:
            pool = http11.ConnectionPool(server.url)
            await asyncio.gather(*(pool.request("POST", "/x", b"{}") for _ in range(4)))
            await asyncio.gather(*(pool.request("POST", "/x", b"{}") for _ in range(4)))
            return server.connections, pool.opened

    assert asyncio.run(go()) == (4, 4)


def test_chunked_bodies_and_connection_close_are_honoured():
    async def answer(served, _body):
        if served == 1:
            return (
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                b'4\r\n{"a"\r\n6;ext=1\r\n: [1]}\r\n0\r\n\r\n'
            )
        return framed({"second": True})

    async def close_after(_served, _body):
        return framed({"closing": True}, "Connection: close\r\n")

    async def go():
        async with ScriptedServer(answer) as chunked, ScriptedServer(close_after) as closing:
            pool = http11.ConnectionPool(chunked.url)
            first = (await pool.request("GET", "/a")).json()
            second = (await pool.request("GET", "/a")).json()
            other = http11.ConnectionPool(closing.url)
            for _ in range(3):
                assert (await other.request("POST", "/b", b"{}")).json() == {"closing": True}
            return first, second, chunked.connections, closing.connections

    first, second, chunked_connections, closing_connections = asyncio.run(go())
    assert first == {"a": [1]} and second == {"second": True}
    assert chunked_connections == 1  # the chunked body was read to its end; the connection reused
    assert closing_connections == 3  # "Connection: close" is never reused


def test_a_connection_the_server_closed_while_idle_is_not_reused():
    async def answer_then_close(served, _body):
        return framed({"n": served}), "close"  # no "Connection: close": it just goes away

    async def go():
        async with ScriptedServer(answer_then_close) as server:
            pool = http11.ConnectionPool(server.url)
            await pool.request("POST", "/x", b"{}")
            # the close reaches the idle connection and is noticed before reuse
            await until(lambda: not pool._idle[0].usable(0.0, 10.0))
            response = await pool.request("POST", "/x", b"{}")
            return response.json(), server.connections, len(server.requests)

    assert asyncio.run(go()) == ({"n": 1}, 2, 2)


def test_a_reused_connection_dropped_without_an_answer_is_retried_once_on_a_new_one():
    async def drop_second(served, _body):
        return None if served == 2 else framed({"served": served})

    async def go():
        async with ScriptedServer(drop_second) as server:
            pool = http11.ConnectionPool(server.url)
            await pool.request("POST", "/x", b"{}")
            again = await pool.request("POST", "/x", b"{}")  # dropped, then sent anew
            return again.json(), server.connections, len(server.requests)

    assert asyncio.run(go()) == ({"served": 1}, 2, 3)


def test_a_new_connection_dropped_without_an_answer_raises():
    async def drop(_served, _body):
        return None

    async def go():
        async with ScriptedServer(drop) as server:
            pool = http11.ConnectionPool(server.url)
            with pytest.raises(ConnectionResetError, match="without answering"):
                await pool.request("POST", "/x", b"{}")
            return len(server.requests)

    assert asyncio.run(go()) == 1  # sent once: a fresh connection is not retried


def test_idle_connections_older_than_max_idle_are_not_reused():
    async def go():
        async with ScriptedServer(echo) as server:
            pool = http11.ConnectionPool(server.url, max_idle_s=0.0)
            for _ in range(3):
                await pool.request("POST", "/x", b"{}")
            return server.connections

    assert asyncio.run(go()) == 3


def test_a_cancelled_request_closes_its_connection_and_the_next_gets_its_own_answer():
    async def slow_first(served, body):
        if served == 1:
            await asyncio.sleep(0.3)
        return framed({"body": json.loads(body)})

    async def go():
        async with ScriptedServer(slow_first) as server:
            pool = http11.ConnectionPool(server.url)
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(pool.request("POST", "/x", b'"late"'), 0.05)
            response = await pool.request("POST", "/x", b'"next"')
            return response.json(), server.connections

    assert asyncio.run(go()) == ({"body": "next"}, 2)


def test_an_answer_that_is_not_http_is_a_protocol_error():
    async def garbage(_served, _body):
        return b"SSH-2.0-OpenSSH\r\n\r\n"

    async def go():
        async with ScriptedServer(garbage) as server:
            with pytest.raises(http11.HTTPProtocolError, match="not an HTTP/1.x status line"):
                await http11.ConnectionPool(server.url).request("GET", "/x")

    asyncio.run(go())


def test_error_statuses_carry_the_server_message():
    async def refuse(_served, _body):
        body = b'{"error": {"message": "no such model"}}'
        head = f"HTTP/1.1 404 Not Found\r\nContent-Length: {len(body)}\r\n\r\n"
        return head.encode() + body

    async def go():
        async with ScriptedServer(refuse) as server:
            response = await http11.ConnectionPool(server.url).request("GET", "/x")
            with pytest.raises(http11.HTTPStatusError) as info:
                response.raise_for_status()
            return info.value

    err = asyncio.run(go())
    assert err.status_code == 404 and err.body == {"error": {"message": "no such model"}}


def test_supports_plain_urls_and_leaves_proxied_ones_to_a_full_client(monkeypatch):
    for name in ("http_proxy", "https_proxy", "all_proxy", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)
    assert http11.supports("http://127.0.0.1:8000/v1")
    assert http11.supports("https://api.openai.com/v1")
    assert not http11.supports("http://user:pw@127.0.0.1:8000/v1")
    assert not http11.supports("http://127.0.0.1:8000/v1?api-version=1")
    assert not http11.supports("ftp://127.0.0.1/v1")
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.internal:3128")
    assert not http11.supports("https://api.openai.com/v1")
    assert http11.supports("http://127.0.0.1:8000/v1")  # the proxy is for https only
    monkeypatch.setenv("NO_PROXY", "api.openai.com")
    assert http11.supports("https://api.openai.com/v1")


def test_a_request_given_up_after_it_left_is_settled_only_when_its_answer_is_in():
    """With `on_settled`, a cancelled caller leaves the connection to read the answer the
    server is still working on (the sglang client's drain waits for such requests)."""

    async def slow(_served, _body):
        await asyncio.sleep(0.3)
        return framed({"late": True})

    async def refuse(_served, _body):
        return None

    async def go():
        settled: list[str] = []
        async with ScriptedServer(slow) as server:
            pool = http11.ConnectionPool(server.url)
            with pytest.raises(asyncio.TimeoutError):
                request = pool.request("POST", "/x", b"{}", on_settled=lambda: settled.append("a"))
                await asyncio.wait_for(request, 0.05)
            assert settled == []  # the server still works on it
            await until(lambda: settled == ["a"])
            await pool.request("POST", "/x", b"{}", on_settled=lambda: settled.append("b"))
            assert settled == ["a", "b"]
            assert server.connections == 2  # the abandoned connection was not reused
        async with ScriptedServer(refuse) as server:
            pool = http11.ConnectionPool(server.url)
            with pytest.raises(ConnectionResetError):
                await pool.request("POST", "/x", b"{}", on_settled=lambda: settled.append("c"))
        return settled

    assert asyncio.run(go()) == ["a", "b", "c"]


def test_deadlines_fail_late_requests_soonest_first_and_spare_the_rest():
    async def answer(_served, body):
        if body == b'"hang"':
            await asyncio.sleep(5)
        return framed({"body": json.loads(body)})

    async def go():
        ended: list[str] = []

        async def one(body: bytes, timeout_s: float):
            try:
                await pool.request("POST", "/x", body, timeout_s=timeout_s)
                ended.append(f"{body.decode()} answered")
            except asyncio.TimeoutError:
                ended.append(f"{body.decode()} timed out after {timeout_s}")

        async with ScriptedServer(answer) as server:
            pool = http11.ConnectionPool(server.url)
            await asyncio.gather(one(b'"hang"', 3.0), one(b'"hang"', 1.5), one(b'"quick"', 2.0))
            assert not pool._timed  # nothing is left to watch
        return ended

    assert asyncio.run(go()) == [
        '"quick" answered',
        '"hang" timed out after 1.5',
        '"hang" timed out after 3.0',
    ]


def test_https_with_the_callers_tls_context(tmp_path):
    """TLS endpoints (the OpenAI API) go through the same client: a local server with a
    self-signed certificate that the caller's context trusts; one that it does not is refused."""
    import datetime
    import ipaddress
    import ssl

    x509 = pytest.importorskip("cryptography.x509")
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(x509.oid.NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(cert_path, key_path)

    async def go():
        server = await asyncio.start_server(
            ScriptedServer(echo)._serve, "127.0.0.1", 0, ssl=server_ctx
        )
        url = f"https://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1"
        try:
            trusted = http11.ConnectionPool(url, ssl.create_default_context(cafile=cert_path))
            answers = [
                (await trusted.request("POST", "/x", http11.dumps({"n": n}))).json()
                for n in range(3)
            ]
            assert trusted.opened == 1  # kept alive over TLS too
            await trusted.aclose()
            with pytest.raises(ssl.SSLError):
                await http11.ConnectionPool(url, ssl.create_default_context()).request("GET", "/")
            return answers
        finally:
            server.close()
            await server.wait_closed()

    assert asyncio.run(go()) == [{"echo": {"n": n}} for n in range(3)]
