"""LLM-backed simulated users and judges: a resilient client for OpenAI-compatible endpoints.

`LLMClient` implements the gym's `JudgeClient` protocol (`complete`, `complete_json`) on top of
`ChatEndpoint`, which owns the transport policy shared with the OpenAI agent policy:

- the async `openai` client with its own retries switched off (mua retries, so it can count);
- a total timeout per attempt (`timeout_s`), enforced on top of the client's socket timeouts
  and counted from when the request leaves the concurrency queue;
- retries with exponential backoff and jitter on timeouts, connection errors, unreadable
  bodies, HTTP 429 (honouring Retry-After) and 5xx; other 4xx fail at once with the server's
  message (401/403/404 as `RunFailure`: a wrong key, URL or model breaks every request, so the
  run stops; `preflight()` sends one small request before a run starts to find out early);
- the whole of a `chat` call (queue, attempts, backoff) is left out of the rollout runner's time
  budgets (`mua.rollout.wait_clock.outside_budgets`): the endpoint bounds its own time;
- reply text cleaned of unencodable characters (`mua.text.clean_text`) as it arrives;
- JSON replies: fences stripped, parsed, validated, and re-asked on failure (counts as a retry;
  the re-ask shows the model its bad reply and the error);
- at most `max_concurrency` requests in flight per client (one semaphore per event loop);
- with `typed_replies=False` (the simulated users and judges, which read only the text), the
  request is plain JSON over mua's own keep-alive HTTP/1.1 connections (`mua.rollout.http11`)
  and the reply is read as plain JSON: no SDK request or response models and no httpx pool
  bookkeeping, which were most of the runner's CPU per user turn. Where that client does not
  apply (a proxy configured for the URL, credentials or a query in it) the SDK's generic `post`
  carries the same body;
- an optional on-disk cache of validated replies (`llm_cache.ReplyCache`).

When retries are spent it raises `mua.gym.UserFailure` naming the endpoint and the last error.
Errors name the endpoint by `public_url` (credentials in the URL left out).

The API key is read from the environment variable named by `api_key_env` at each request and
sent as a header; it is never stored on these objects, logged, or put in an error message (a
server message echoing it is redacted). For a local endpoint (`base_url` set) an unset variable
is fine: the placeholder key `EMPTY` is sent, as local vLLM/SGLang servers expect. For the
OpenAI API itself an unset variable is a `UsageError` when the client is built.

Not here: the user's persona prompts (each gym builds its own messages), streaming, tool use by
the simulated user, and any global rate limiting across processes.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import importlib
import json
import logging
import os
import random
import re
import weakref
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

from mua.config.rollout import LLMUserConfig, ScriptedUserConfig
from mua.errors import RunFailure, UsageError
from mua.gym.api import UserFailure
from mua.rollout import http11
from mua.rollout.llm_cache import ReplyCache, request_key
from mua.rollout.wait_clock import outside_budgets
from mua.text import clean_text

OPENAI_API_URL = "https://api.openai.com/v1"
LOCAL_PLACEHOLDER_KEY = "EMPTY"
MAX_BACKOFF_S = 60.0
# Requests in flight per HTTP connection pool. httpx checks every idle connection of a pool (a
# system call each) whenever a request starts or ends, so one pool of N connections costs O(N)
# per request; the endpoint spreads its concurrency over pools of at most this many.
REQUESTS_PER_POOL = 8
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
# Counters a run reports for its LLM user (eval summary and table, MLflow), by report name.
REPORTED_COUNTERS = {
    "user_requests": "requests",
    "user_retries": "retries",
    "user_rate_limited": "rate_limited",
    "user_timeouts": "timeouts",
    "user_failures": "failures",
}
REASK_TEMPLATE = (
    "Your previous reply could not be used ({error}). Answer again with only the requested "
    "JSON, no prose and no code fences."
)


def public_url(url: str) -> str:
    """`url` without user:password and without a query string (where keys sometimes travel)."""
    from urllib.parse import urlsplit, urlunsplit

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


def parse_json_text(text: str) -> Any:
    """Parse a JSON reply, tolerating ``` fences and prose around one object; ValueError if not."""
    stripped = text.strip()
    fenced = re.search(r"```(?:json|JSON)?\s*\n?(.*?)```", stripped, flags=re.DOTALL)
    if fenced:
        stripped = fenced.group(1).strip()
    try:
        return json.loads(stripped)
    except json.JSONDecodeError as err:
        start, end = stripped.find("{"), stripped.rfind("}")
        if 0 <= start < end:
            try:
                return json.loads(stripped[start : end + 1])
            except json.JSONDecodeError:
                pass
        raise ValueError(f"not valid JSON ({err.msg} at char {err.pos})") from None


def _retry_after_s(response: Any) -> float | None:
    headers = getattr(response, "headers", None) or {}
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is None:
            continue
        try:
            return min(MAX_BACKOFF_S, max(0.0, float(value) * scale))
        except ValueError:
            continue  # an HTTP date; fall back to our own backoff
    return None


def _server_message(err: Any) -> str:
    body = getattr(err, "body", None)
    if isinstance(body, dict):
        inner = body.get("error", body)
        message = inner.get("message") if isinstance(inner, dict) else None
        if message:
            return str(message)[:300]
    return str(getattr(err, "message", err))[:300]


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
        self._plain_http = not typed_replies and http11.supports(self.base_url)
        self.counts: dict[str, int] = dict.fromkeys(COUNTER_NAMES, 0)
        self._jitter = random.Random()
        # asyncio primitives and HTTP pools belong to one event loop; keep one set per loop.
        self._per_loop: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    def _loop_state(self) -> tuple[Any, asyncio.Semaphore]:
        """This loop's transport (a `http11.ConnectionPool`, or the SDK's `_Pools`) and cap."""
        loop = asyncio.get_running_loop()
        state = self._per_loop.get(loop)
        if state is None and self._plain_http:
            tls = _tls_context() if self.base_url.startswith("https:") else None
            pool = http11.ConnectionPool(self.base_url, tls)
            state = self._per_loop[loop] = (pool, asyncio.Semaphore(self.max_concurrency))
        if state is None:
            import openai

            # The real key travels per request in a header (read at call time, never stored).
            tls = _tls_context()
            clients = [
                openai.AsyncOpenAI(
                    api_key=LOCAL_PLACEHOLDER_KEY,
                    base_url=self.base_url,
                    timeout=self.timeout_s,
                    max_retries=0,
                    **({"http_client": openai.DefaultAsyncHttpxClient(verify=tls)} if tls else {}),
                )
                for _ in range(-(-self.max_concurrency // REQUESTS_PER_POOL))
            ]
            state = (_Pools(clients), asyncio.Semaphore(self.max_concurrency))
            self._per_loop[loop] = state
        return state

    def _api_key(self) -> str:
        return os.environ.get(self.api_key_env) or LOCAL_PLACEHOLDER_KEY

    def _redact(self, text: str) -> str:
        key = os.environ.get(self.api_key_env)
        return text.replace(key, "***") if key and len(key) >= 4 else text

    def backoff_delay_s(self, retry_number: int, retry_after_s: float | None = None) -> float:
        """Equal-jitter exponential backoff: half fixed, half random; never below Retry-After."""
        base_s = min(MAX_BACKOFF_S, self.backoff_s * 2 ** (retry_number - 1))
        delay_s = base_s / 2 + self._jitter.uniform(0, base_s / 2)
        if retry_after_s is not None:
            delay_s = max(delay_s, retry_after_s)
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

        `parse` raising ValueError/TypeError/KeyError marks the reply malformed: it is retried,
        with a re-ask message appended when `reask` is true.
        """
        with outside_budgets():
            return await self._chat(messages, parse, reask, create_kwargs)

    async def _chat(
        self,
        messages: list[dict],
        parse: Callable[[Any], Any] | None,
        reask: bool,
        create_kwargs: dict,
    ) -> tuple[Any, Any]:
        attempts = 1 + self.max_retries
        asked = list(messages)
        last_reason, retry_after_s = "no attempt made", None
        for attempt in range(attempts):
            if attempt:
                self.counts["retries"] += 1
                await asyncio.sleep(self.backoff_delay_s(attempt, retry_after_s))
            retry_after_s = None
            try:
                message = await self._request_once(asked, create_kwargs)
            except _Retryable as err:
                last_reason, retry_after_s = err.reason, err.retry_after_s
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

    @property
    def where(self) -> str:
        """How errors name this endpoint: label, URL without credentials, model."""
        return f"{self.label} at {public_url(self.base_url)} (model {self.model})"

    async def preflight(self, **create_kwargs: Any) -> None:
        """One small request, retried like any other; returns when it was answered.

        A wrong key, URL or model (401/403/404) raises `RunFailure` at the first attempt; an
        endpoint that is down or keeps failing raises `UserFailure` after the retries."""
        await self.chat([{"role": "user", "content": "Reply with OK."}], **create_kwargs)

    async def _request_once(self, messages: list[dict], create_kwargs: dict) -> Any:
        import openai

        transport, semaphore = self._loop_state()
        headers = {"Authorization": f"Bearer {self._api_key()}"}
        async with semaphore:
            self.counts["requests"] += 1
            try:
                if self._plain_http:
                    response = await self._post_plain(transport, messages, headers, create_kwargs)
                else:
                    with transport.lease() as client:
                        response = await asyncio.wait_for(
                            self._send(client, messages, headers, create_kwargs),
                            timeout=self.timeout_s,
                        )
            except (asyncio.TimeoutError, openai.APITimeoutError):
                self.counts["timeouts"] += 1
                raise _Retryable(f"request timed out after {self.timeout_s:g} s") from None
            except (openai.APIStatusError, http11.HTTPStatusError) as err:
                raise self._status_error(err) from None
            except (openai.APIConnectionError, OSError) as err:
                self.counts["connection_errors"] += 1
                raise _Retryable(f"connection error: {err}") from None
            except (openai.APIResponseValidationError, ValueError) as err:
                self.counts["malformed"] += 1
                raise _Retryable(f"unreadable response body: {type(err).__name__}") from None
        if not getattr(response, "choices", None):
            self.counts["malformed"] += 1
            raise _Retryable("response without choices")
        return _cleaned(response.choices[0].message)

    async def _send(self, client: Any, messages: list[dict], headers: dict, create_kwargs: dict):
        """One request; a typed ChatCompletion, or with `typed_replies=False` an object whose
        `choices[0].message.content` is the reply text (choices empty when the body has none)."""
        if self.typed_replies:
            return await client.chat.completions.create(
                model=self.model, messages=messages, extra_headers=headers, **create_kwargs
            )
        body = await client.post(
            "/chat/completions",
            cast_to=object,
            body={"model": self.model, "messages": messages, **create_kwargs},
            options={"headers": headers},
        )
        return _plain_reply(body)

    async def _post_plain(
        self, pool: http11.ConnectionPool, messages: list[dict], headers: dict, create_kwargs: dict
    ) -> Any:
        """`_send` with `typed_replies=False` over mua's own HTTP client: the same body."""
        body = http11.dumps({"model": self.model, "messages": messages, **create_kwargs})
        response = await pool.request(
            "POST",
            "/chat/completions",
            body,
            {"Content-Type": "application/json", **headers},
            timeout_s=self.timeout_s,
        )
        return _plain_reply(response.raise_for_status().json())

    def _status_error(self, err: Any) -> Exception:
        status = int(getattr(err, "status_code", 0) or 0)
        message = self._redact(_server_message(err))
        if status == 429:
            self.counts["rate_limited"] += 1
            return _Retryable(f"HTTP 429: {message}", _retry_after_s(err.response))
        if status >= 500:
            self.counts["server_errors"] += 1
            return _Retryable(f"HTTP {status}: {message}")
        self.counts["failures"] += 1
        where = self.where
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

    async def aclose(self) -> None:
        """Close the HTTP pools of the current event loop (others close with their loop)."""
        state = self._per_loop.pop(asyncio.get_running_loop(), None)
        if state is None:
            return
        if isinstance(state[0], http11.ConnectionPool):
            await state[0].aclose()
            return
        for client in state[0].clients:
            await client.close()


@functools.cache
def _tls_context() -> Any:
    """One TLS context for every pool of the process, made as the openai client's HTTP library
    makes its default one; None where that library cannot (each client then loads the CA
    bundle itself, which is slow)."""
    for name in ("httpx2", "httpx"):
        try:
            return importlib.import_module(name).create_ssl_context()
        except (ImportError, AttributeError):
            continue
    return None


class _Pools:
    """One event loop's clients (each its own connection pool); `lease` hands out the one with
    the fewest requests in flight."""

    def __init__(self, clients: list[Any]) -> None:
        self.clients = clients
        self.in_flight = [0] * len(clients)

    @contextlib.contextmanager
    def lease(self):
        i = min(range(len(self.clients)), key=self.in_flight.__getitem__)
        self.in_flight[i] += 1
        try:
            yield self.clients[i]
        finally:
            self.in_flight[i] -= 1


def _cleaned(message: Any) -> Any:
    """The reply message with its text and tool-call arguments cleaned (`mua.text`)."""
    content = getattr(message, "content", None)
    if isinstance(content, str):
        message.content = clean_text(content)
    for call in getattr(message, "tool_calls", None) or []:
        fn = getattr(call, "function", None)
        for name in ("name", "arguments"):
            value = getattr(fn, name, None)
            if isinstance(value, str):
                setattr(fn, name, clean_text(value))
    return message


def _plain_reply(body: Any) -> Any:
    """A chat completion body read as plain JSON, shaped like the SDK's reply as far as
    `choices[0].message.content` (no choices when the body has no message)."""
    try:
        message = body["choices"][0]["message"]
        content = message["content"] if isinstance(message, dict) else None
    except (KeyError, IndexError, TypeError):
        return SimpleNamespace(choices=[])
    return SimpleNamespace(
        choices=[SimpleNamespace(message=SimpleNamespace(role="assistant", content=content))]
    )


def _content_text(message: Any) -> str:
    content = getattr(message, "content", None)
    if not isinstance(content, str) or not content.strip():
        raise ValueError("empty reply")
    return content


class LLMClient:
    """`JudgeClient` for an LLM user or judge configured by `LLMUserConfig`."""

    def __init__(self, cfg: LLMUserConfig) -> None:
        self.cfg = cfg
        self.endpoint = ChatEndpoint(
            base_url=cfg.resolved_base_url() or OPENAI_API_URL,
            model=cfg.resolved_model(),
            api_key_env=cfg.api_key_env,
            timeout_s=cfg.timeout_s,
            max_retries=cfg.max_retries,
            backoff_s=cfg.backoff_s,
            max_concurrency=cfg.max_concurrency,
            typed_replies=False,
        )
        self.cache = ReplyCache(cfg.cache_dir) if cfg.cache_dir else None
        self._reported: dict[str, int] = dict.fromkeys(COUNTER_NAMES, 0)

    @property
    def counters(self) -> dict[str, int]:
        """Counts for metrics: requests, retries, failures, cache_hits and error kinds."""
        return dict(self.endpoint.counts)

    def take_report(self) -> dict[str, int]:
        """`REPORTED_COUNTERS` since the previous call (all of them at the first)."""
        now = self.counters
        delta = {name: now[key] - self._reported[key] for name, key in REPORTED_COUNTERS.items()}
        self._reported = now
        return delta

    def _key(self, messages: list[dict]) -> str:
        return request_key(
            base_url=self.endpoint.base_url,
            model=self.endpoint.model,
            messages=messages,
            temperature=self.cfg.temperature,
            max_tokens=self.cfg.max_tokens,
        )

    async def _ask(self, messages: list[dict], parse: Callable[[str], Any]) -> Any:
        key = self._key(messages) if self.cache else ""
        if self.cache:
            cached = self.cache.get(key)
            if cached is not None:
                try:
                    value = parse(cached)
                except (ValueError, TypeError, KeyError):
                    pass  # a stale entry that no longer validates: ask again, then overwrite
                else:
                    self.endpoint.counts["cache_hits"] += 1
                    return value
        message, value = await self.endpoint.chat(
            messages,
            parse=lambda m: parse(_content_text(m)),
            temperature=self.cfg.temperature,
            max_tokens=self.cfg.max_tokens,
        )
        if self.cache:
            self.cache.put(key, message.content)
        return value

    async def complete(self, messages: list[dict]) -> str:
        return await self._ask(messages, lambda text: text)

    async def complete_json(
        self, messages: list[dict], validate: Callable[[Any], Any] | None = None
    ) -> Any:
        def parse(text: str) -> Any:
            value = parse_json_text(text)
            if validate is None:
                return value
            checked = validate(value)
            return value if checked is None else checked

        return await self._ask(messages, parse)

    async def preflight(self) -> None:
        """`ChatEndpoint.preflight` with this client's sampling settings (a parameter the
        server rejects fails here as it would on every request); the cache is not consulted."""
        await self.endpoint.preflight(
            temperature=self.cfg.temperature, max_tokens=min(self.cfg.max_tokens, 16)
        )

    async def aclose(self) -> None:
        await self.endpoint.aclose()


def user_call_report(client: Any) -> dict[str, int]:
    """`LLMClient.take_report()`, or {} for a scripted user (no client)."""
    return client.take_report() if isinstance(client, LLMClient) else {}


def preflight_user(user_cfg: LLMUserConfig | ScriptedUserConfig) -> None:
    """Before a run starts: one request to the LLM user's endpoint (nothing for a scripted one).

    Raises `RunFailure` naming the endpoint (credentials left out) and the HTTP status when the
    key, URL or model is wrong, or when the endpoint cannot answer after its retries. With
    `user.cache_dir` set an unreachable endpoint is only a warning (every reply may be cached);
    a refusal still stops the run. Uses its own client, so the run's counters start at zero."""
    client = make_llm_client(user_cfg)
    if client is None:
        return

    async def probe() -> None:
        try:
            await client.preflight()
        finally:
            await client.aclose()

    try:
        asyncio.run(probe())
    except UserFailure as err:
        if user_cfg.cache_dir:
            logging.getLogger("mua.rollout").warning(
                "%s; going on with the reply cache in %s", err, user_cfg.cache_dir
            )
            return
        raise RunFailure(f"{err}; nothing was run") from None


def make_llm_client(user_cfg: LLMUserConfig | ScriptedUserConfig) -> LLMClient | None:
    """The client a gym's LLM user gets, or None for a scripted user."""
    if not isinstance(user_cfg, LLMUserConfig):
        return None
    if user_cfg.resolved_base_url() is None and not os.environ.get(user_cfg.api_key_env):
        raise UsageError(
            f"user.kind=llm talks to the OpenAI API but ${user_cfg.api_key_env} is not set; "
            "export it, or set user.base_url (or $OPENAI_BASE_URL) to a local server"
        )
    return LLMClient(user_cfg)
