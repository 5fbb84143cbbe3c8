"""One OpenAI-compatible chat endpoint over aiohttp: retries, deadlines, a concurrency cap, counts.

`ChatEndpoint.chat(messages, parse=..., **create_kwargs)` posts `/chat/completions` and returns
(assistant message, parse(message)) for the simulated users, judges and the API agent. Its retry,
deadline and error policy is in docs/architecture.md ("Chat endpoints"); spent retries raise
`UserFailure`, a wrong key, URL or model `RunFailure`. The API key is read from `api_key_env` at
each request and never stored, logged or put in an error.
Not here: streaming, the user's prompts, caching (`mua.llm.llm_cache`), cross-process rate limits.
"""

from __future__ import annotations

import asyncio
import base64
import email.utils
import json
import os
import random
import time
import weakref
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import aiohttp
from yarl import URL

from mua.errors import RunFailure, UserFailure
from mua.http_session import BodyTooLarge, LoopSessions, dumps, read_capped
from mua.llm.wait_clock import outside_budgets
from mua.text import clean_text

LOCAL_PLACEHOLDER_KEY = "EMPTY"
MAX_BACKOFF_S = 60.0
# The largest answer read: a chat reply of any sane `max_tokens` is far below it.
MAX_REPLY_BYTES = 2 * 1024 * 1024
# Text longer than this many characters per requested token is not what the request asked for.
MAX_CHARS_PER_TOKEN = 32
COUNTER_NAMES = (
    "requests",
    "retries",
    "failures",
    "cache_hits",
    "timeouts",
    "connection_errors",
    "rate_limited",
    "server_errors",
    "malformed",
)
REASK_TEMPLATE = (
    "Your previous reply could not be used ({error}). Answer again with only the requested "
    "JSON, no prose and no code fences."
)


def public_url(url: str) -> str:
    """`url` without user:password and without a query string (where keys sometimes travel)."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = parts.port
    except ValueError:
        return "<unparseable URL>"
    netloc = f"[{host}]" if ":" in host else host
    if port is not None:
        netloc += f":{port}"
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


class _Retryable(Exception):
    """A failed attempt worth retrying; `reason` is what the final error will report."""

    def __init__(self, reason: str, retry_after_s: float | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.retry_after_s = retry_after_s


def retry_after_s(headers: Any) -> float | None:
    """The wait a 429 asks for (`retry-after-ms`, or `Retry-After` in seconds or as a date)."""
    headers = headers or {}
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is None:
            continue
        try:
            return min(MAX_BACKOFF_S, max(0.0, float(value) * scale))
        except ValueError:
            pass
        try:
            when = email.utils.parsedate_to_datetime(value).timestamp()
        except (TypeError, ValueError):
            continue
        return min(MAX_BACKOFF_S, max(0.0, when - time.time()))
    return None


def _server_message(raw: bytes) -> str:
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        return raw.decode("utf-8", errors="replace")[:300]
    if isinstance(body, dict):
        inner = body.get("error", body)
        message = inner.get("message") if isinstance(inner, dict) else inner
        if message:
            return str(message)[:300]
    return str(body)[:300]


# The fields of an `EndpointConfig` that `ChatEndpoint.for_config` reads as they are.
CONNECTION_SETTINGS = ("api_key_env", "timeout_s", "max_retries", "backoff_s", "max_concurrency")


class ChatEndpoint:
    """One OpenAI-compatible chat endpoint with retries, backoff, a concurrency cap and counters."""

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        api_key_env: str,
        timeout_s: float,
        max_retries: int,
        backoff_s: float,
        max_concurrency: int,
        label: str = "LLM user",
        typed_replies: bool = True,
        base_url_setting: str = "base_url",
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.api_key_env = api_key_env
        self.timeout_s = float(timeout_s)
        self.max_retries = int(max_retries)
        self.backoff_s = float(backoff_s)
        self.max_concurrency = int(max_concurrency)
        self.label = label
        self.typed_replies = typed_replies
        self.base_url_setting = base_url_setting
        self.counts: dict[str, int] = dict.fromkeys(COUNTER_NAMES, 0)
        # where requests go: the base URL's path + /chat/completions, its query kept; credentials
        # in the URL travel as HTTP Basic auth, in place of the key (as httpx sends them)
        url = URL(self.base_url)
        path = url.path.rstrip("/") + "/chat/completions"
        self._target = url.with_user(None).with_path(path).with_query(url.query)
        self._url_auth = None
        if url.user or url.password:
            pair = f"{url.user or ''}:{url.password or ''}".encode()
            self._url_auth = "Basic " + base64.b64encode(pair).decode("ascii")
        self._jitter = random.Random()
        self._sessions = LoopSessions(self.base_url)
        self._semaphores: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    @classmethod
    def for_config(cls, cfg: Any, *, base_url: str, model: str, **options: Any) -> ChatEndpoint:
        """The endpoint an `EndpointConfig` section describes: its key variable, timeout,
        retries, backoff and concurrency cap, at `base_url` for `model`; `options` are the other
        keyword arguments (`label`, `typed_replies`, `base_url_setting`) or overrides."""
        settings = {name: getattr(cfg, name) for name in CONNECTION_SETTINGS}
        return cls(base_url=base_url, model=model, **{**settings, **options})

    @property
    def where(self) -> str:
        """How errors name this endpoint: label, URL without credentials, model."""
        return f"{self.label} at {public_url(self.base_url)} (model {self.model})"

    def _semaphore(self) -> asyncio.Semaphore:
        loop = asyncio.get_running_loop()
        semaphore = self._semaphores.get(loop)
        if semaphore is None:
            semaphore = self._semaphores[loop] = asyncio.Semaphore(self.max_concurrency)
        return semaphore

    def _redact(self, text: str) -> str:
        key = os.environ.get(self.api_key_env)
        return text.replace(key, "***") if key and len(key) >= 4 else text

    def backoff_delay_s(self, retry_number: int, retry_after: float | None = None) -> float:
        """Equal-jitter exponential backoff: half fixed, half random; never below Retry-After."""
        base_s = min(MAX_BACKOFF_S, self.backoff_s * 2 ** (retry_number - 1))
        delay_s = base_s / 2 + self._jitter.uniform(0, base_s / 2)
        if retry_after is not None:
            delay_s = max(delay_s, retry_after)
        return min(MAX_BACKOFF_S, delay_s)

    async def chat(
        self,
        messages: list[dict],
        *,
        parse: Callable[[Any], Any] | None = None,
        reask: bool = True,
        **create_kwargs: Any,
    ) -> tuple[Any, Any]:
        """Return (assistant message, parse(message)) or raise UserFailure after retries.

        The message has `role`, `content` and `tool_calls` (None, or calls with `id`, `type` and
        `function.name` / `function.arguments`, as the OpenAI SDK's objects have them)."""
        with outside_budgets():
            return await self._chat(messages, parse, reask, create_kwargs)

    async def _chat(
        self, messages: list[dict], parse: Any, reask: bool, create_kwargs: dict
    ) -> tuple[Any, Any]:
        attempts = 1 + self.max_retries
        asked = list(messages)
        last_reason, wait_s = "no attempt made", None
        for attempt in range(attempts):
            if attempt:
                self.counts["retries"] += 1
                await asyncio.sleep(self.backoff_delay_s(attempt, wait_s))
            wait_s = None
            try:
                message = await self._request_once(asked, create_kwargs)
            except _Retryable as err:
                last_reason, wait_s = err.reason, err.retry_after_s
                continue
            if parse is None:
                return message, None
            try:
                return message, parse(message)
            except (ValueError, TypeError, KeyError) as err:
                self.counts["malformed"] += 1
                last_reason = f"malformed reply: {err}"
                if reask:
                    bad = {"role": "assistant", "content": message.content or ""}
                    note = {"role": "user", "content": REASK_TEMPLATE.format(error=err)}
                    asked = [*messages, bad, note]
        self.counts["failures"] += 1
        raise UserFailure(
            f"{self.where} gave no usable reply after {attempts} attempt(s): "
            f"{self._redact(last_reason)}"
        )

    async def preflight(self, **create_kwargs: Any) -> None:
        """One small request, retried like any other; returns when it was answered usably.

        A wrong key, URL or model (401/403/404, a redirect) raises `RunFailure` at the first
        attempt; an endpoint that is down or keeps failing raises `UserFailure` after retries."""
        await self.chat([{"role": "user", "content": "Reply with OK."}], **create_kwargs)

    async def _request_once(self, messages: list[dict], create_kwargs: dict) -> Any:
        kwargs = dict(create_kwargs)
        extra = kwargs.pop("extra_body", None) or {}
        body = dumps({"model": self.model, "messages": messages, **kwargs, **extra})
        headers = {
            "Content-Type": "application/json",
            "Accept": "application/json",
            "Authorization": self._url_auth
            or f"Bearer {os.environ.get(self.api_key_env) or LOCAL_PLACEHOLDER_KEY}",
        }
        session = await self._sessions.get()
        async with self._semaphore():
            self.counts["requests"] += 1
            try:
                async with session.post(
                    self._target,
                    data=body,
                    headers=headers,
                    allow_redirects=False,
                    proxy=self._sessions.proxy,
                    timeout=aiohttp.ClientTimeout(total=self.timeout_s),
                ) as response:
                    raw = await read_capped(response, MAX_REPLY_BYTES)
                    status, reply_headers = response.status, response.headers
            except asyncio.TimeoutError:
                self.counts["timeouts"] += 1
                raise _Retryable(f"request timed out after {self.timeout_s:g} s") from None
            except (aiohttp.ClientError, OSError) as err:
                self.counts["connection_errors"] += 1
                raise _Retryable(f"connection error: {type(err).__name__}: {err}") from None
            except BodyTooLarge as err:
                self.counts["malformed"] += 1
                raise _Retryable(f"unusable reply: {err}") from None
        if status >= 300:
            raise self._status_error(status, raw, reply_headers)
        try:
            reply = json.loads(raw)
        except (ValueError, UnicodeDecodeError) as err:
            self.counts["malformed"] += 1
            raise _Retryable(f"unreadable response body: {type(err).__name__}") from None
        message = _message_of(reply)
        if message is None:
            self.counts["malformed"] += 1
            raise _Retryable("response without choices")
        if not self.typed_replies:
            problem = _unusable_as_text(message, create_kwargs)
            if problem:
                self.counts["malformed"] += 1
                raise _Retryable(f"unusable reply: {problem}")
        return message

    def _status_error(self, status: int, raw: bytes, headers: Any) -> Exception:
        message = self._redact(_server_message(raw))
        if status == 429:
            self.counts["rate_limited"] += 1
            return _Retryable(f"HTTP 429: {message}", retry_after_s(headers))
        if status >= 500:
            self.counts["server_errors"] += 1
            return _Retryable(f"HTTP {status}: {message}")
        self.counts["failures"] += 1
        where = self.where
        if status < 400:
            return RunFailure(self._redirect_message(status, headers.get("location")))
        if status in (401, 403):
            return RunFailure(
                f"{where} refused the credentials (HTTP {status}: {message}); check the key in "
                f"${self.api_key_env}"
            )
        if status == 404:
            return RunFailure(
                f"{where} answered HTTP 404 ({message}); check the URL and model name"
            )
        return UserFailure(f"{where} rejected the request (HTTP {status}): {message}")

    def _redirect_message(self, status: int, location: str | None) -> str:
        if not location:
            return f"{self.where} answered a redirect (HTTP {status}) without a Location"
        target = str(self._target.join(URL(location)))
        base = target.split("?", 1)[0].removesuffix("/").removesuffix("/chat/completions")
        return (
            f"{self.where} answered a redirect (HTTP {status}) to {public_url(target)}; "
            f"set {self.base_url_setting} to {public_url(base)}"
        )

    async def aclose(self) -> None:
        """Close the current event loop's connections (other loops' close with their loop)."""
        await self._sessions.aclose()


def _message_of(reply: Any) -> Any:
    """The reply's first choice's message as an object (`role`, `content`, `tool_calls`), text
    cleaned (`mua.text`); None when the body has no message."""
    try:
        raw = reply["choices"][0]["message"]
    except (KeyError, IndexError, TypeError):
        return None
    if not isinstance(raw, dict):
        return None
    content = raw.get("content")
    calls = []
    for call in raw.get("tool_calls") or []:
        fn = call.get("function") if isinstance(call, dict) else None
        fn = fn if isinstance(fn, dict) else {}
        name, arguments = fn.get("name"), fn.get("arguments")
        calls.append(
            SimpleNamespace(
                id=call.get("id") if isinstance(call, dict) else None,
                type="function",
                function=SimpleNamespace(
                    name=clean_text(name) if isinstance(name, str) else name,
                    arguments=clean_text(arguments) if isinstance(arguments, str) else arguments,
                ),
            )
        )
    return SimpleNamespace(
        role="assistant",
        content=clean_text(content) if isinstance(content, str) else content,
        tool_calls=calls or None,
    )


def _unusable_as_text(message: Any, create_kwargs: dict) -> str:
    """Why a text reader cannot use `message` ('' when it can)."""
    if message.tool_calls and not create_kwargs.get("tools"):
        return "it holds tool calls, and no tools were offered"
    if message.tool_calls:
        return ""  # tool calls that were asked for
    if not isinstance(message.content, str):
        return f"its content is {json.dumps(message.content)[:40]}, not text"
    max_tokens = create_kwargs.get("max_tokens")
    if isinstance(max_tokens, int) and len(message.content) > MAX_CHARS_PER_TOKEN * max_tokens:
        return f"{len(message.content)} characters of text for max_tokens={max_tokens}"
    return ""
