"""LLM-backed simulated users and judges: `LLMClient`, the gym's `JudgeClient` for `user.kind: llm`.

`complete`, `complete_json` (fences stripped, parsed, validated, re-asked) and `complete_tools`
(structured calls, or calls in text with `user.tool_parser`) over a `ChatEndpoint`, reading
replies as text only; spent retries raise `UserFailure` (the trajectory is masked). An optional
disk cache keeps validated replies. `preflight_user` sends one request before a run, so a wrong
key, URL or model stops it with one line. Not here: persona prompts, streaming, rate limits.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
from collections.abc import Callable
from typing import Any

from mua.config.users import LLMUserConfig, ScriptedUserConfig
from mua.errors import RunFailure, UsageError, UserFailure
from mua.llm.chat_endpoint import (  # noqa: F401 - the names other modules import from here
    COUNTER_NAMES,
    LOCAL_PLACEHOLDER_KEY,
    MAX_BACKOFF_S,
    REASK_TEMPLATE,
    ChatEndpoint,
    public_url,
)
from mua.llm.llm_cache import ReplyCache, request_key
from mua.llm.tool_reply import ToolReply, read_tool_reply

OPENAI_API_URL = "https://api.openai.com/v1"
# Counters a run reports for its LLM user (eval summary and table, MLflow), by report name.
REPORTED_COUNTERS = {
    "user_requests": "requests",
    "user_retries": "retries",
    "user_rate_limited": "rate_limited",
    "user_timeouts": "timeouts",
    "user_failures": "failures",
}


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


def _content_text(message: Any) -> str:
    content = getattr(message, "content", None)
    if not isinstance(content, str) or not content.strip():
        raise ValueError("empty reply")
    return content


class LLMClient:
    """`JudgeClient` for an LLM user or judge configured by `LLMUserConfig`."""

    def __init__(
        self, cfg: LLMUserConfig, label: str = "LLM user", setting: str = "user.base_url"
    ) -> None:
        """`label` names the endpoint in errors (a judge's is not the user's); `setting` is
        the recipe key of its URL (named in a redirect's hint)."""
        self.cfg = cfg
        self.endpoint = ChatEndpoint.for_config(
            cfg,
            base_url=cfg.resolved_base_url() or OPENAI_API_URL,
            model=cfg.resolved_model(),
            label=label,
            typed_replies=False,
            base_url_setting=setting,
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

    def _key(self, messages: list[dict], tools: list[dict] | None = None) -> str:
        return request_key(
            base_url=self.endpoint.base_url,
            model=self.endpoint.model,
            messages=messages,
            temperature=self.cfg.temperature,
            max_tokens=self.cfg.max_tokens,
            tools=tools,
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

    async def complete_tools(self, messages: list[dict], tools: list[dict]) -> ToolReply:
        """The reply to `messages` with `tools` offered: its text and tool calls, structured or,
        with `tool_parser` set, written in the text in that family's format
        (`mua.llm.tool_reply`). A call that cannot be read is retried like a malformed reply."""
        parser = self.cfg.tool_parser
        key = self._key(messages, tools) if self.cache else ""
        if self.cache:
            cached = self.cache.get(key)
            if cached is not None:
                try:
                    reply = ToolReply.from_json(cached)
                except ValueError:
                    pass
                else:
                    self.endpoint.counts["cache_hits"] += 1
                    return reply
        _, reply = await self.endpoint.chat(
            messages,
            parse=lambda m: read_tool_reply(m, parser, tools),
            reask=False,
            tools=tools,
            temperature=self.cfg.temperature,
            max_tokens=self.cfg.max_tokens,
        )
        if self.cache:
            self.cache.put(key, reply.to_json())
        return reply

    async def preflight(self) -> None:
        """`ChatEndpoint.preflight` with this client's sampling settings (a parameter the
        server rejects fails here as it would on every request) and its reading of replies (an
        empty one is not usable either); the cache is not consulted."""
        await self.endpoint.chat(
            [{"role": "user", "content": "Reply with OK."}],
            parse=_content_text,
            reask=False,
            temperature=self.cfg.temperature,
            max_tokens=min(self.cfg.max_tokens, 16),
        )

    async def aclose(self) -> None:
        await self.endpoint.aclose()


def user_call_report(client: Any) -> dict[str, int]:
    """`LLMClient.take_report()`, or {} for a scripted user (no client)."""
    return client.take_report() if isinstance(client, LLMClient) else {}


def preflight_user(
    user_cfg: LLMUserConfig | ScriptedUserConfig,
    label: str = "LLM user",
    setting: str = "user.base_url",
) -> None:
    """Before a run starts: one request to the LLM user's endpoint (nothing for a scripted one).

    Raises `RunFailure` naming the endpoint (credentials left out) and the HTTP status when the
    key, URL or model is wrong, or when the endpoint cannot answer after its retries. With
    `user.cache_dir` set an unreachable endpoint is only a warning (every reply may be cached);
    a refusal still stops the run. Uses its own client, so the run's counters start at zero.
    A `checkpoint:` endpoint is not asked: a trained model need not answer "Reply with OK."."""
    if getattr(user_cfg, "checkpoint", None) is not None:
        return  # a local model the verb serves itself (mua.serve.checkpoints), listening already
    client = make_llm_client(user_cfg, label, setting)
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


def make_llm_client(
    user_cfg: LLMUserConfig | ScriptedUserConfig,
    label: str = "LLM user",
    setting: str = "user.base_url",
) -> LLMClient | None:
    """The client a gym's LLM user (or a judge, by `label`) gets, or None for a scripted user."""
    if not isinstance(user_cfg, LLMUserConfig):
        return None
    if user_cfg.resolved_base_url() is None and not os.environ.get(user_cfg.api_key_env):
        raise UsageError(
            f"user.kind=llm talks to the OpenAI API but ${user_cfg.api_key_env} is not set; "
            "export it, or set user.base_url (or $OPENAI_BASE_URL) to a local server"
        )
    return LLMClient(user_cfg, label, setting)
