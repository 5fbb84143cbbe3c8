"""`mua serve`'s HTTP/1.1 listener: JSON requests and answers on the engine's own event loop.

`start_listener(handle, host, port)` (a coroutine, run on the loop that drives the engine) opens
the socket and returns a `Listener` (its `port`; `close()` ends it and its open connections). Each connection reads requests one after another
(keep-alive, as HTTP/1.1 clients expect): the request line, the headers, and a body of
`Content-Length` bytes parsed as JSON; `await handle(method, target, body)` gives the status and
the JSON payload, written back in one write. A request whose body is not JSON gets 400 from the
handler's side (`BadBody` carries the parser's message); a request that is not HTTP/1.x, or a
chunked body, gets 400 and the connection closes.

Why on the engine's loop and not one thread per connection (the standard library's server): a
generation request then costs the process one wake-up of this loop and none of its own threads,
so the thread that runs the model (which holds Python's interpreter lock between its tensor
operations) is interrupted as little as possible while hundreds of conversations come and go.

Not here: TLS, HTTP/2, streaming answers, chunked request bodies, pipelining beyond reading the
next request after answering the previous one.
"""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Awaitable, Callable
from http import HTTPStatus
from typing import Any

from mua.rollout.http11 import keeps_alive, parse_header_lines

Handle = Callable[[str, str, Any], Awaitable[tuple[int, Any]]]

_MAX_HEAD = 64 * 1024


class BadBody(ValueError):
    """The request body is not JSON (the handler answers 400 with this message)."""


class _BadRequest(Exception):
    """Not a readable HTTP/1.x request: answered with 400, then the connection closes."""


class Listener:
    """The listening socket and the connections it accepted."""

    def __init__(self, handle: Handle):
        self.handle = handle
        self.server: asyncio.Server | None = None
        self.writers: set[asyncio.StreamWriter] = set()

    @property
    def port(self) -> int:
        return self.server.sockets[0].getsockname()[1]

    async def connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        sock = writer.get_extra_info("socket")
        if sock is not None:  # every answer is one write: never hold it back for an ACK
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.writers.add(writer)
        try:
            await _serve_connection(self.handle, reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass  # the client went away mid-request or mid-answer
        finally:
            self.writers.discard(writer)
            writer.close()

    def close(self) -> None:
        """Stop listening and close every open connection (call it on the listener's loop)."""
        if self.server is not None:
            self.server.close()
        for writer in list(self.writers):
            writer.close()


async def start_listener(handle: Handle, host: str, port: int) -> Listener:
    """Listen on (host, port) (0: a free port) and serve every connection with `handle`."""
    listener = Listener(handle)
    # a burst of clients (every rollout of a training step connects at once) needs a long
    # backlog, or connections are reset
    listener.server = await asyncio.start_server(
        listener.connection, host, port, backlog=1024, limit=_MAX_HEAD, reuse_address=True
    )
    return listener


async def _serve_connection(
    handle: Handle, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    while True:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError as err:
            if err.partial.strip():
                raise
            return  # the client closed an idle connection
        except asyncio.LimitOverrunError:
            await _answer(writer, 431, {"error": {"message": "request headers too large"}}, False)
            return
        try:
            method, target, version, headers = _parse_head(head)
            if "chunked" in headers.get("transfer-encoding", "").lower():
                raise _BadRequest("chunked request bodies are not served; send Content-Length")
            length = int(headers.get("content-length") or 0)
            if length < 0:
                raise _BadRequest("negative Content-Length")
        except (_BadRequest, ValueError) as err:
            await _answer(writer, 400, {"error": {"message": f"bad request: {err}"}}, False)
            return
        if headers.get("expect", "").lower() == "100-continue":
            writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        raw = await reader.readexactly(length) if length else b""
        keep_alive = keeps_alive(version, headers)
        status, payload = await handle(method, target, _json_body(raw))
        await _answer(writer, status, payload, keep_alive)
        if not keep_alive:
            return


def _parse_head(head: bytes) -> tuple[str, str, str, dict[str, str]]:
    """(method, target, version, headers with lowercased names) of a request's head."""
    try:
        lines = head.decode("latin-1").split("\r\n")
        method, target, version = lines[0].split(" ")
    except ValueError:
        raise _BadRequest("the request line is not 'METHOD target HTTP/1.x'") from None
    if not version.startswith("HTTP/1."):
        raise _BadRequest(f"{version} is not served (HTTP/1.x only)")
    return method, target, version, parse_header_lines([line for line in lines[1:] if line])


def _json_body(raw: bytes) -> Any:
    """The parsed JSON body ({} when empty), or a `BadBody` for the handler to answer."""
    if not raw:
        return {}
    try:
        return json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        return BadBody(f"the request body is not JSON: {err}")


async def _answer(
    writer: asyncio.StreamWriter, status: int, payload: Any, keep_alive: bool
) -> None:
    data = json.dumps(payload).encode()
    try:
        reason = HTTPStatus(status).phrase
    except ValueError:
        reason = ""
    head = (
        f"HTTP/1.1 {status} {reason}\r\nServer: mua-serve\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(data)}\r\n"
        + ("" if keep_alive else "Connection: close\r\n")
        + "\r\n"
    )
    writer.write(head.encode("latin-1") + data)
    await writer.drain()
