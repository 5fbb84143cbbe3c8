"""A small asyncio HTTP/1.1 client for JSON requests to inference servers, with keep-alive.

`ConnectionPool(base_url)` belongs to one event loop. `request(method, path, body, headers)`
takes an idle connection to the server (or opens one), writes the request, reads the status
line, the headers and the body (by Content-Length, chunked, or up to the close), and puts the
connection back for the next request unless the server said it closes it. Idle connections
are not reused once the server may have dropped them: when it closed them (noticed before
reuse), or after `max_idle_s` (4 s, under the 5 s keep-alive of uvicorn, which SGLang and vLLM
serve with). A request on a reused connection that fails before any byte of the answer came
back (the server closed it as the request left) is sent once more on a new connection; any
other failure raises. Cancelling a request (a timeout) closes its connection, so a half-read
response never reaches the next request.

It exists for the hot path of a rollout: every user turn and every engine turn is one small JSON
request to a server on the node, and a general-purpose client (the OpenAI SDK over httpx) spends
several times the CPU of the exchange itself on request and response models, header validation
and pool bookkeeping, CPU the runner's one event loop does not have to spare at hundreds of
conversations.

What it does not do: proxies (callers keep a full client for URLs a proxy applies to, see
`supports`), redirects, compression, HTTP/2, streaming, cookies, or retries (callers own their
retry policy; a failed request raises). Errors: `OSError` (refused, reset, the server closing
the connection mid-response) and `HTTPProtocolError` (an answer that is not HTTP/1.x).
"""

from __future__ import annotations

import asyncio
import json
import time
import urllib.request
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import urlsplit

import mua

T = TypeVar("T")
_HEAD_END = b"\r\n\r\n"
_TIMEOUT = getattr(asyncio, "timeout", None)
_USER_AGENT = f"mua/{mua.__version__}"


class _NoAnswer(ConnectionResetError):
    """The connection failed before any byte of the answer arrived."""


class HTTPProtocolError(ValueError):
    """The server's answer is not readable HTTP/1.x."""


@dataclass
class Response:
    status: int
    headers: dict[str, str]  # names lowercased; a repeated header keeps its last value
    body: bytes

    def json(self) -> Any:
        """The body parsed as JSON (ValueError when it is not)."""
        return json.loads(self.body)

    def raise_for_status(self) -> Response:
        """This response, or `HTTPStatusError` when its status is 400 or more."""
        if self.status >= 400:
            raise HTTPStatusError(self)
        return self


class HTTPStatusError(Exception):
    """An HTTP error status: `status_code`, `response`, the body as JSON (`body`, None when it is
    not JSON) and as text (`message`), as the OpenAI SDK's status errors carry them."""

    def __init__(self, response: Response) -> None:
        super().__init__(f"HTTP {response.status}")
        self.status_code = response.status
        self.response = response
        try:
            self.body = response.json()
        except ValueError:
            self.body = None
        self.message = response.body.decode("utf-8", errors="replace")


def dumps(value: Any) -> bytes:
    """JSON bytes as OpenAI-compatible clients send them (UTF-8, compact, no NaN)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()


async def within(awaitable: Awaitable[T], timeout_s: float) -> T:
    """`asyncio.wait_for(awaitable, timeout_s)` without a task of its own where the running
    Python has `asyncio.timeout` (3.11+): one task fewer per request on the hot path."""
    if _TIMEOUT is None:
        return await asyncio.wait_for(awaitable, timeout_s)
    async with _TIMEOUT(timeout_s):
        return await awaitable


def supports(base_url: str) -> bool:
    """Whether this client can talk to `base_url`: plain http(s) with a host, no credentials or
    query in the URL, and no proxy configured for it in the environment."""
    try:
        parts = urlsplit(base_url)
        parts.port  # noqa: B018 - raises on a bad port
    except ValueError:
        return False
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return False
    if parts.username or parts.password or parts.query or parts.fragment:
        return False
    proxies = urllib.request.getproxies()
    if parts.scheme in proxies or "all" in proxies:
        return bool(urllib.request.proxy_bypass(parts.hostname))
    return True


class _Connection:
    __slots__ = ("reader", "writer", "idle_since")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.idle_since = 0.0

    def usable(self, now: float, max_idle_s: float) -> bool:
        return (
            now - self.idle_since < max_idle_s
            and not self.writer.is_closing()
            and not self.reader.at_eof()
        )

    def close(self) -> None:
        self.writer.close()


class ConnectionPool:
    """Keep-alive connections to one server, for use on one event loop.

    It opens a connection whenever none is idle, so the number of connections is the number of
    requests the caller has in flight at once (callers cap that with their own semaphore).
    """

    def __init__(self, base_url: str, ssl_context: Any = None, max_idle_s: float = 4.0) -> None:
        parts = urlsplit(base_url)
        self.host = parts.hostname or ""
        self.tls = parts.scheme == "https"
        self.port = parts.port or (443 if self.tls else 80)
        self.ssl_context = ssl_context if self.tls else None
        self.prefix = parts.path.rstrip("/")
        host = f"[{self.host}]" if ":" in self.host else self.host
        default_port = 443 if self.tls else 80
        self.host_header = host if self.port == default_port else f"{host}:{self.port}"
        self.max_idle_s = max_idle_s
        self.opened = 0  # connections opened over the pool's life
        self._idle: list[_Connection] = []

    async def _open(self) -> _Connection:
        if self.tls:
            import ssl

            ctx = self.ssl_context or ssl.create_default_context()
            reader, writer = await asyncio.open_connection(
                self.host, self.port, ssl=ctx, server_hostname=self.host
            )
        else:
            reader, writer = await asyncio.open_connection(self.host, self.port)
        self.opened += 1
        return _Connection(reader, writer)

    def _take_idle(self) -> _Connection | None:
        """The most recently used idle connection still worth reusing; older ones are closed."""
        now = time.monotonic()
        while self._idle:
            conn = self._idle.pop()
            if conn.usable(now, self.max_idle_s):
                return conn
            conn.close()
        return None

    async def request(
        self,
        method: str,
        path: str,
        body: bytes | None = None,
        headers: dict[str, str] | None = None,
    ) -> Response:
        """One request on a pooled connection; `path` follows the base URL's path."""
        head = [
            f"{method} {self.prefix}{path} HTTP/1.1",
            f"Host: {self.host_header}",
            f"User-Agent: {_USER_AGENT}",
            "Accept: application/json",
        ]
        if body is not None or method in ("POST", "PUT", "PATCH"):
            head.append(f"Content-Length: {len(body or b'')}")
        head.extend(f"{name}: {value}" for name, value in (headers or {}).items())
        data = ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + (body or b"")
        conn = self._take_idle()
        if conn is not None:
            try:
                return await self._exchange(conn, data, method)
            except _NoAnswer:
                pass  # the server had closed it: once more on a new connection
        try:
            return await self._exchange(await self._open(), data, method)
        except _NoAnswer as err:
            raise ConnectionResetError(str(err)) from None

    async def _exchange(self, conn: _Connection, data: bytes, method: str) -> Response:
        keep = False
        try:
            try:
                conn.writer.write(data)
                await conn.writer.drain()
            except OSError as err:
                raise _NoAnswer(f"the connection broke while sending: {err}") from None
            response, keep = await _read_response(conn.reader, method)
            return response
        finally:
            if keep:
                conn.idle_since = time.monotonic()
                self._idle.append(conn)
            else:
                conn.close()

    async def aclose(self) -> None:
        idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()
        for conn in idle:
            try:
                await conn.writer.wait_closed()
            except OSError:
                pass


async def _read_response(reader: asyncio.StreamReader, method: str) -> tuple[Response, bool]:
    """(the response, whether the connection may carry another request)."""
    interim = False
    while True:
        try:
            head = await reader.readuntil(_HEAD_END)
        except (asyncio.IncompleteReadError, ConnectionResetError) as err:
            if not interim and not getattr(err, "partial", b""):
                raise _NoAnswer("the server closed the connection without answering") from None
            raise ConnectionResetError("the server closed the connection mid-response") from None
        except asyncio.LimitOverrunError:
            raise HTTPProtocolError("response headers too long") from None
        lines = head[: -len(_HEAD_END)].decode("latin-1").split("\r\n")
        version, status = _status_line(lines[0])
        if not 100 <= status < 200:
            break
        interim = True  # 1xx: an interim answer; the real one follows
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep:
            raise HTTPProtocolError(f"bad response header line {line[:80]!r}")
        headers[name.strip().lower()] = value.strip()
    connection = headers.get("connection", "").lower()
    keep = "close" not in connection and (version == "HTTP/1.1" or "keep-alive" in connection)
    try:
        if method == "HEAD" or status in (204, 304):
            body = b""
        elif "chunked" in headers.get("transfer-encoding", "").lower():
            body = await _read_chunked(reader)
        elif "content-length" in headers:
            try:
                length = int(headers["content-length"])
            except ValueError:
                raise HTTPProtocolError("bad Content-Length") from None
            body = await reader.readexactly(length)
        else:
            body, keep = await reader.read(), False
    except asyncio.IncompleteReadError:
        raise ConnectionResetError("the server closed the connection mid-response") from None
    return Response(status, headers, body), keep


def _status_line(line: str) -> tuple[str, int]:
    parts = line.split(None, 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
        raise HTTPProtocolError(f"not an HTTP/1.x status line: {line[:80]!r}")
    return parts[0], int(parts[1])


async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
    chunks = []
    while True:
        line = await reader.readuntil(b"\r\n")
        try:
            size = int(line.split(b";", 1)[0].strip(), 16)
        except ValueError:
            raise HTTPProtocolError("bad chunk size in a chunked response") from None
        if size == 0:
            while (await reader.readuntil(b"\r\n")) != b"\r\n":  # trailers
                pass
            return b"".join(chunks)
        chunks.append((await reader.readexactly(size + 2))[:-2])
