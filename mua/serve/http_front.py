"""`mua serve`'s HTTP listener: aiohttp's server, JSON in and out, on the engine's own event loop.

`start_listener(handle, host, port)` (a coroutine, run on the loop that drives the engine) opens
the socket and returns a `Listener` (its `port`; `await close()` ends it and its connections).
Every request, whatever its method and path, goes to `await handle(method, target, body)`,
where `body` is the request body parsed as JSON (`{}` when empty) or a `BadBody` carrying the
parser's message (the handler answers 400); the returned (status, payload) is sent as JSON.
aiohttp does the HTTP/1.1 work: keep-alive, chunked bodies, `Expect: 100-continue`, bad
requests (400). Bodies up to `MAX_BODY_BYTES` are read (weight pushes are large).

Why on the engine's loop and not one thread per connection: a generation request then costs
the process one wake-up of this loop and none of its own threads, so the thread that runs the
model is interrupted as little as possible while hundreds of conversations come and go.

Not here: TLS, HTTP/2, streaming answers, routing (the handler routes).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

Handle = Callable[[str, str, Any], Awaitable[tuple[int, Any]]]

MAX_BODY_BYTES = 1 << 40
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
        status, payload = await handle(
            request.method, request.path_qs, _json_body(await request.read())
        )
        return web.Response(
            status=status, body=json.dumps(payload).encode(), content_type="application/json"
        )

    app = web.Application(client_max_size=MAX_BODY_BYTES)
    app.router.add_route("*", "/{tail:.*}", serve)
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, host, port, backlog=BACKLOG, reuse_address=True)
    await site.start()
    return Listener(runner)


def _json_body(raw: bytes) -> Any:
    """The parsed JSON body ({} when empty), or a `BadBody` for the handler to answer."""
    if not raw:
        return {}
    try:
        return json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        return BadBody(f"the request body is not JSON: {err}")
