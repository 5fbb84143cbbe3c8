"""A small asyncio HTTP/1.1 client for JSON requests to inference servers, with keep-alive.

`ConnectionPool(base_url)` belongs to one event loop. `request(method, path, body, headers)`
takes an idle connection to the server (or opens one), writes the request, and its connection
(an `asyncio.Protocol`) reads the answer as bytes arrive: the status line, the headers and the
body (by Content-Length, chunked, or up to the close). The connection goes back to the pool
unless the server said it closes it. Idle connections are not reused once the server may have
dropped them: when it closed them (noticed before reuse), or after `max_idle_s` (4 s, under the
5 s keep-alive of uvicorn, which SGLang and vLLM serve with). A request on a reused connection
that fails before any byte of the answer came back (the server closed it as the request left)
is sent once more on a new connection; any other failure raises. A request's `timeout_s` is
kept by one timer per pool for the soonest deadline, not one timer per request. A cancelled
request closes its connection, so a half-read answer never reaches the next request, unless
the caller asked to hear when the request is over on the wire (`on_settled`): then the
connection reads the answer to its end first.

It exists for the hot path of a rollout: every user turn and every engine turn is one small JSON
request to a server on the node, and a general-purpose client (the OpenAI SDK over httpx) spends
several times the CPU of the exchange itself on request and response models, header validation
and pool bookkeeping, CPU the runner's one event loop does not have to spare at hundreds of
conversations.

What it does not do: proxies (callers keep a full client for URLs a proxy applies to, see
`supports`), redirects, compression, HTTP/2, streaming, cookies, or retries (callers own their
retry policy; a failed request raises). Errors: `OSError` (refused, reset, the server closing
the connection mid-answer), `asyncio.TimeoutError` and `HTTPProtocolError` (an answer that is
not HTTP/1.x).
"""

from __future__ import annotations

import asyncio
import json
import math
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import mua

_HEAD_END = b"\r\n\r\n"
_MAX_HEAD = 65536
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


class _Connection(asyncio.Protocol):
    """One connection; reads the answer to its request in flight as bytes arrive.

    `send` writes a request and returns a future for (response, keep-alive). The connection
    follows its request to the end of the answer even when nobody waits for the future any more
    (`abandon`), so a request that was sent is accounted for until the server answered it.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.idle_since = 0.0
        self._buffer = bytearray()
        self._eof = False
        self._in_flight = False
        self._method = "GET"
        self._waiter: asyncio.Future | None = None
        self._on_settled: Callable[[], None] | None = None

    # ---- asyncio.Protocol ---------------------------------------------------------------

    def connection_made(self, transport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self._buffer += data
        if self._in_flight:
            self._advance()

    def eof_received(self) -> bool:
        self._eof = True
        if self._in_flight:
            self._advance()  # an answer that runs to the close ends here
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = self._eof = True
        if self._in_flight:
            self._advance(exc)

    # ---- requests -----------------------------------------------------------------------

    def usable(self, now: float, max_idle_s: float) -> bool:
        return (
            not self.closed
            and not self._eof
            and not self._buffer  # nothing the server sent unasked
            and now - self.idle_since < max_idle_s
            and self.transport is not None
            and not self.transport.is_closing()
        )

    def send(self, data: bytes, method: str) -> asyncio.Future:
        self._waiter = waiter = self.loop.create_future()
        if self.closed or self.transport is None or self.transport.is_closing():
            waiter.set_exception(_NoAnswer("the connection closed before the request left"))
            return waiter
        self._method, self._in_flight = method, True
        self.transport.write(data)
        return waiter

    def abandon(self, on_settled: Callable[[], None]) -> None:
        """Nobody waits any more: close once the answer is in (or the connection fails), then
        call `on_settled`."""
        if self._in_flight:
            self._on_settled = on_settled
        else:
            self.close()
            on_settled()

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    def expire(self) -> None:
        """The answer is late: fail the request and close the connection."""
        if self._in_flight:
            self._finish(None, asyncio.TimeoutError("no answer by the request's deadline"))
        self.close()

    def _advance(self, lost: Exception | None = None) -> None:
        try:
            parsed = _parse_response(self._buffer, self._method, self._eof)
        except HTTPProtocolError as err:
            self._finish(None, err)
            return
        if parsed is not None:
            self._finish(parsed, None)
        elif self._eof and self._buffer:
            self._finish(
                None, ConnectionResetError("the server closed the connection mid-response")
            )
        elif self._eof:
            reason = f": {lost}" if lost is not None else ""
            self._finish(
                None, _NoAnswer(f"the server closed the connection without answering{reason}")
            )

    def _finish(self, parsed: tuple[Response, bool, int] | None, err: Exception | None) -> None:
        self._in_flight = False
        if parsed is not None:
            del self._buffer[: parsed[2]]
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            if err is not None:
                waiter.set_exception(err)
            else:
                waiter.set_result(parsed[:2])
        settled, self._on_settled = self._on_settled, None
        if settled is not None:  # an abandoned request: its answer is in
            self.close()
            settled()


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
        # requests with a deadline, and one timer for the soonest of them (not one per request)
        self._timed: dict[_Connection, float] = {}
        self._watch: asyncio.TimerHandle | None = None
        self._watch_at = math.inf

    async def _open(self) -> _Connection:
        loop = asyncio.get_running_loop()
        tls: dict[str, Any] = {}
        if self.tls:
            import ssl

            tls = dict(
                ssl=self.ssl_context or ssl.create_default_context(), server_hostname=self.host
            )
        _, conn = await loop.create_connection(
            lambda: _Connection(loop), self.host, self.port, **tls
        )
        self.opened += 1
        return conn

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
        on_settled: Callable[[], None] | None = None,
        timeout_s: float | None = None,
    ) -> Response:
        """One request on a pooled connection; `path` follows the base URL's path.

        `timeout_s` bounds the whole request (connecting, sending, the answer): past it,
        `asyncio.TimeoutError` and the connection is closed. `on_settled`, when given, is called
        once the request is over on the wire: its answer read, its connection failed or timed
        out. A caller cancelled after the request left then leaves the connection to read the
        answer and call it; without `on_settled`, cancelling closes the connection at once.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s if timeout_s is not None else math.inf
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
                return await self._exchange(conn, data, method, on_settled, deadline)
            except _NoAnswer:
                pass  # the server had closed it: once more on a new connection
        try:
            opening = self._open()
            if deadline < math.inf:
                opening = asyncio.wait_for(opening, max(0.0, deadline - loop.time()))
            conn = await opening
        except BaseException:
            if on_settled is not None:
                on_settled()
            raise
        try:
            return await self._exchange(conn, data, method, on_settled, deadline)
        except _NoAnswer as err:
            if on_settled is not None:
                on_settled()
            raise ConnectionResetError(str(err)) from None

    async def _exchange(
        self,
        conn: _Connection,
        data: bytes,
        method: str,
        on_settled: Callable[[], None] | None,
        deadline: float,
    ) -> Response:
        if deadline < math.inf:
            self._time(conn, deadline)
        try:
            response, keep = await conn.send(data, method)
        except _NoAnswer:
            self._timed.pop(conn, None)
            conn.close()  # the caller may try again: settled only once that is over
            raise
        except asyncio.CancelledError:
            if on_settled is not None:
                conn.abandon(on_settled)  # keeps its deadline: settled by then at the latest
            else:
                self._timed.pop(conn, None)
                conn.close()
            raise
        except BaseException:
            self._timed.pop(conn, None)
            conn.close()
            if on_settled is not None:
                on_settled()
            raise
        self._timed.pop(conn, None)
        if keep:
            conn.idle_since = time.monotonic()
            self._idle.append(conn)
        else:
            conn.close()
        if on_settled is not None:
            on_settled()
        return response

    def _time(self, conn: _Connection, deadline: float) -> None:
        self._timed[conn] = deadline
        if deadline < self._watch_at:
            if self._watch is not None:
                self._watch.cancel()
            self._watch = conn.loop.call_at(deadline, self._expire_late)
            self._watch_at = deadline

    def _expire_late(self) -> None:
        """Fail the requests past their deadline; wake again at the soonest deadline left."""
        self._watch, self._watch_at = None, math.inf
        loop = asyncio.get_running_loop()
        now = loop.time()
        for conn, deadline in list(self._timed.items()):
            if deadline <= now:
                del self._timed[conn]
                conn.expire()
        if self._timed:
            soonest = min(self._timed.values())
            self._watch = loop.call_at(soonest, self._expire_late)
            self._watch_at = soonest

    async def aclose(self) -> None:
        idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()
        await asyncio.sleep(0)  # the transports close their sockets on the next loop pass


def _parse_response(buffer: bytearray, method: str, eof: bool) -> tuple[Response, bool, int] | None:
    """(response, keep-alive, bytes used) once `buffer` holds a whole answer, else None."""
    start = 0
    while True:
        end = buffer.find(_HEAD_END, start)
        if end < 0:
            if len(buffer) - start > _MAX_HEAD:
                raise HTTPProtocolError("response headers too long")
            return None
        lines = bytes(buffer[start:end]).decode("latin-1").split("\r\n")
        version, status = _status_line(lines[0])
        start = end + len(_HEAD_END)
        if not 100 <= status < 200:
            break  # 1xx: an interim answer; the real one follows
    headers = parse_header_lines(lines[1:])
    keep = keeps_alive(version, headers)
    if method == "HEAD" or status in (204, 304):
        return Response(status, headers, b""), keep, start
    if "chunked" in headers.get("transfer-encoding", "").lower():
        parsed = _parse_chunked(buffer, start)
        if parsed is None:
            return None
        body, used = parsed
        return Response(status, headers, body), keep, used
    if "content-length" in headers:
        try:
            length = int(headers["content-length"])
        except ValueError:
            raise HTTPProtocolError("bad Content-Length") from None
        if len(buffer) - start < length:
            return None
        return (
            Response(status, headers, bytes(buffer[start : start + length])),
            keep,
            start + length,
        )
    if not eof:
        return None  # the body runs to the close
    return Response(status, headers, bytes(buffer[start:])), False, len(buffer)


def parse_header_lines(lines: list[str]) -> dict[str, str]:
    """Header lines of a request or an answer -> {lowercased name: value} (a repeated header
    keeps its last value); `HTTPProtocolError` for a line that is not `name: value`."""
    headers: dict[str, str] = {}
    for line in lines:
        name, sep, value = line.partition(":")
        if not sep:
            raise HTTPProtocolError(f"malformed header line {line[:80]!r}")
        headers[name.strip().lower()] = value.strip()
    return headers


def keeps_alive(version: str, headers: dict[str, str]) -> bool:
    """Whether the connection stays open after this message: HTTP/1.1 unless it says close,
    HTTP/1.0 only when it says keep-alive."""
    connection = headers.get("connection", "").lower()
    return "close" not in connection and (version == "HTTP/1.1" or "keep-alive" in connection)


def _status_line(line: str) -> tuple[str, int]:
    parts = line.split(None, 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
        raise HTTPProtocolError(f"not an HTTP/1.x status line: {line[:80]!r}")
    return parts[0], int(parts[1])


def _parse_chunked(buffer: bytearray, at: int) -> tuple[bytes, int] | None:
    """(body, end) of a chunked body starting at `at` once it is all in `buffer`, else None."""
    chunks = []
    while True:
        line_end = buffer.find(b"\r\n", at)
        if line_end < 0:
            return None
        try:
            size = int(bytes(buffer[at:line_end]).split(b";", 1)[0].strip(), 16)
        except ValueError:
            raise HTTPProtocolError("bad chunk size in a chunked response") from None
        at = line_end + 2
        if size == 0:
            while True:  # trailers, up to an empty line
                line_end = buffer.find(b"\r\n", at)
                if line_end < 0:
                    return None
                empty, at = line_end == at, line_end + 2
                if empty:
                    return b"".join(chunks), at
        if len(buffer) < at + size + 2:
            return None
        chunks.append(bytes(buffer[at : at + size]))
        at += size + 2
