"""aiohttp client sessions for mua's HTTP clients: one per event loop, closed with their loop.

`LoopSessions.get()` returns the running loop's session, made on first use and closed when the
loop shuts down (or by `aclose()`), since a process runs many loops and a session belongs to one.
Connections are kept alive for `KEEPALIVE_S`, under uvicorn's 5 s; proxies are looked up once per
base URL (`proxy`); `read_capped` reads a body up to a limit.
Not here: retries, deadlines, status handling (each caller has its own policy).
"""

from __future__ import annotations

import asyncio
import json
import urllib.request
import weakref
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlsplit

import aiohttp

import mua

KEEPALIVE_S = 4.0
USER_AGENT = f"mua/{mua.__version__}"


class BodyTooLarge(ValueError):
    """A response body over the caller's limit."""


def dumps(value: Any) -> bytes:
    """JSON bytes as OpenAI-compatible clients send them (UTF-8, compact, no NaN)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()


def proxy_for(base_url: str) -> str | None:
    """The proxy the environment sets for `base_url` (`HTTP_PROXY`, `HTTPS_PROXY`, `ALL_PROXY`,
    less `NO_PROXY`), or None."""
    parts = urlsplit(base_url)
    proxies = urllib.request.getproxies()
    proxy = proxies.get(parts.scheme) or proxies.get("all")
    if not proxy or not parts.hostname or urllib.request.proxy_bypass(parts.hostname):
        return None
    return proxy


async def _held_until_loop_ends(session: aiohttp.ClientSession) -> AsyncIterator[None]:
    """An async generator the loop finalizes at shutdown: its `finally` closes the session."""
    try:
        yield
    finally:
        await session.close()


class LoopSessions:
    """One `aiohttp.ClientSession` per running event loop (see the module docstring)."""

    def __init__(self, base_url: str, max_connections: int = 0) -> None:
        self.max_connections = max_connections  # per loop; 0: no cap
        # the proxy for `base_url` from the environment, looked up once (not per request)
        self.proxy = proxy_for(base_url)
        self._per_loop: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self.opened = 0  # connections opened, over every loop's session
        self._trace = aiohttp.TraceConfig()
        self._trace.on_connection_create_end.append(self._count_connection)

    async def _count_connection(self, *_args: Any) -> None:
        self.opened += 1

    async def get(self) -> aiohttp.ClientSession:
        loop = asyncio.get_running_loop()
        held = self._per_loop.get(loop)
        if held is not None and not held[0].closed:
            return held[0]
        session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(
                limit=self.max_connections, keepalive_timeout=KEEPALIVE_S
            ),
            headers={"User-Agent": USER_AGENT},
            trace_configs=[self._trace],
        )
        closer = _held_until_loop_ends(session)
        await closer.__anext__()  # from now on the loop finalizes it when it shuts down
        self._per_loop[loop] = (session, closer)
        return session

    async def fetch(
        self, method: str, url: str, *, timeout_s: float, **kwargs: Any
    ) -> tuple[int, bytes, str | None]:
        """One request through this loop's session and the environment's proxy, redirects not
        followed: (status, body, Location header). aiohttp's errors and timeouts propagate."""
        session = await self.get()
        async with session.request(
            method,
            url,
            allow_redirects=False,
            proxy=self.proxy,
            timeout=aiohttp.ClientTimeout(total=timeout_s),
            **kwargs,
        ) as response:
            return response.status, await response.read(), response.headers.get("Location")

    async def aclose(self) -> None:
        """Close the running loop's session (the sessions of other loops close with them)."""
        held = self._per_loop.pop(asyncio.get_running_loop(), None)
        if held is not None:
            await held[1].aclose()


async def read_capped(response: aiohttp.ClientResponse, limit: int) -> bytes:
    """The whole body of `response`, or `BodyTooLarge` as soon as it passes `limit` bytes."""
    declared = response.content_length
    if declared is not None and declared > limit:
        raise BodyTooLarge(f"the answer is {declared} bytes, over the {limit}-byte limit")
    parts, size = [], 0
    async for chunk in response.content.iter_chunked(65536):
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge(f"the answer is over the {limit}-byte limit")
        parts.append(chunk)
    return b"".join(parts)
