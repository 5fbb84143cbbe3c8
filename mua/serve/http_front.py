"""`mua serve`'s HTTP listener: aiohttp's server, JSON in and out, on the engine's own event loop.

`start_listener(handle, host, port)` returns a `Listener` (`port`, `await close()`); every request
goes to `await handle(method, target, body)` with the body parsed as JSON (`{}` when empty) or a
`BadBody` (answered 400), and the returned (status, payload) is sent as JSON. Each route's body is
capped (`body_limit`): over it, 413 and the connection closed. It runs on the engine's loop so a
request costs no thread of its own. Not here: TLS, HTTP/2, streaming, routing.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

Handle = Callable[[str, str, Any], Awaitable[tuple[int, Any]]]

MiB = 1 << 20
# the most a request body may hold, by path; any other path (GETs, pause, abort, memory) gets
# SMALL_BODY_BYTES
BODY_LIMITS = {
    "/generate": 64 * MiB,
    "/v1/chat/completions": 64 * MiB,
    "/update_weights_from_tensor": 2048 * MiB,
    "/load_lora_adapter_from_tensors": 2048 * MiB,
    "/update_weights_from_disk": MiB,
}
SMALL_BODY_BYTES = MiB
MAX_BODY_BYTES = max(BODY_LIMITS.values())
# a burst of clients (every rollout of a training step connects at once) needs a long backlog,
# or connections are reset
BACKLOG = 1024


class BadBody(ValueError):
    """The request body is not JSON (the handler answers 400 with this message)."""


class Listener:
    """The listening socket and the connections it accepted."""

    def __init__(self, runner: web.AppRunner) -> None:
        self.runner = runner

    @property
    def port(self) -> int:
        return self.runner.addresses[0][1]

    async def close(self) -> None:
        """Stop listening and close every open connection (await it on the listener's loop)."""
        await self.runner.cleanup()


async def start_listener(handle: Handle, host: str, port: int) -> Listener:
    """Listen on (host, port) (0: a free port) and serve every request with `handle`."""

    async def serve(request: web.Request) -> web.Response:
        limit = body_limit(request.path)
        declared = request.content_length
        raw = None if declared is not None and declared > limit else await _read(request, limit)
        if raw is None:
            return _too_large(request.path, limit)
        status, payload = await handle(request.method, request.path_qs, _json_body(raw))
        return web.Response(
            status=status, body=json.dumps(payload).encode(), content_type="application/json"
        )

    app = web.Application(client_max_size=MAX_BODY_BYTES)
    app.router.add_route("*", "/{tail:.*}", serve)
    # lingering_time=0: after a 413 the unread body is not drained, the connection closes
    runner = web.AppRunner(app, access_log=None, handle_signals=False, lingering_time=0)
    await runner.setup()
    site = web.TCPSite(runner, host, port, backlog=BACKLOG, reuse_address=True)
    await site.start()
    return Listener(runner)


def body_limit(path: str) -> int:
    """The most bytes a request body to `path` may hold."""
    return BODY_LIMITS.get(path.rstrip("/") or "/", SMALL_BODY_BYTES)


async def _read(request: web.Request, limit: int) -> bytes | None:
    """The request body, or None as soon as it passes `limit` bytes (the rest is not read)."""
    chunks, size = [], 0
    async for chunk in request.content.iter_any():
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


def _too_large(path: str, limit: int) -> web.Response:
    """413; the listener then closes the connection, its unread body never drained."""
    from mua.serve.refusals import error_body

    message = f"the request body is larger than {path} accepts ({limit // MiB} MiB at most)"
    response = web.Response(
        status=413,
        body=json.dumps(error_body(message, path)).encode(),
        content_type="application/json",
    )
    response.force_close()  # `Connection: close`
    return response


def _json_body(raw: bytes) -> Any:
    """The parsed JSON body ({} when empty), or a `BadBody` for the handler to answer."""
    if not raw:
        return {}
    try:
        return json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        return BadBody(f"the request body is not JSON: {err}")
