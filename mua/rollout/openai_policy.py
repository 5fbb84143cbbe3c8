"""An agent policy that drives any OpenAI-compatible server at message level (`rollout.engine: openai`).

For evaluation only (no token ids, log-probs or loss masks). `OpenAIPolicy.act(messages, tools)`
returns one assistant message dict (`content`, and `tool_calls`, `parse_errors` when non-empty):
native tool calls, else calls written as text, read with `mua.families.tool_calls`;
`message_to_action` makes it the gym's `AgentAction`. Transport is `ChatEndpoint`; spent retries
stop the run (`RunFailure`). mua's messages are converted to the wire format here and nowhere else.
"""

from __future__ import annotations

import json
import os
from typing import Any

from mua.errors import RunFailure, UsageError
from mua.families.tool_calls import ParserName, action_as_message, parse_action, read_native_calls
from mua.gym.api import AgentAction, ToolCall, UserFailure
from mua.llm.chat_endpoint import ChatEndpoint
from mua.llm.llm_client import OPENAI_API_URL


def to_wire_messages(messages: list[dict]) -> list[dict]:
    """Mua messages -> OpenAI chat messages (ids paired, arguments as JSON strings)."""
    wire: list[dict] = []
    pending_ids: list[str] = []
    for turn, msg in enumerate(messages):
        role = msg.get("role")
        if role == "assistant":
            out: dict[str, Any] = {"role": "assistant", "content": msg.get("content") or ""}
            calls = msg.get("tool_calls") or []
            if calls:
                out["tool_calls"] = [_wire_call(call, turn, i) for i, call in enumerate(calls)]
                pending_ids = [c["id"] for c in out["tool_calls"]]
            wire.append(out)
        elif role == "tool":
            call_id = msg.get("tool_call_id") or (pending_ids.pop(0) if pending_ids else None)
            if call_id is None:  # a tool result nobody asked for: servers reject a bare one
                wire.append(
                    {
                        "role": "user",
                        "content": f"[{msg.get('name', 'tool')}] {msg.get('content', '')}",
                    }
                )
            else:
                wire.append(
                    {
                        "role": "tool",
                        "tool_call_id": call_id,
                        "content": str(msg.get("content", "")),
                    }
                )
        elif role in ("system", "user"):
            wire.append({"role": role, "content": msg.get("content") or ""})
        else:  # `env` interventions and anything else reach the agent as user turns
            wire.append({"role": "user", "content": msg.get("content") or ""})
    return wire


def _wire_call(call: dict, turn: int, index: int) -> dict:
    fn = call.get("function") or call
    args = fn.get("arguments", {})
    return {
        "id": call.get("id") or f"call_{turn}_{index}",
        "type": "function",
        "function": {
            "name": fn.get("name", ""),
            "arguments": args if isinstance(args, str) else json.dumps(args, ensure_ascii=False),
        },
    }


def message_from_reply(
    reply: Any, tool_parser: ParserName = "auto", tools: list[dict] | None = None
) -> dict:
    """The server's assistant message -> mua's assistant message dict (see module doc); calls
    written as text are read with `tool_parser` (any family of `mua.families`), typed by `tools`."""
    content = reply.content or ""
    raw_calls = getattr(reply, "tool_calls", None) or []
    if raw_calls:
        calls, errors = read_native_calls(raw_calls)
        message: dict[str, Any] = {"role": "assistant", "content": content}
        if calls:
            message["tool_calls"] = calls
    else:  # tool calls written as text: stored the way the runner stores sampled turns
        action = parse_action(content, tool_parser, tools)
        message, errors = action_as_message(action), list(action.parse_errors)
    if errors:
        message["parse_errors"] = errors
    return message


def message_to_action(message: dict) -> AgentAction:
    """Mua's assistant message dict -> the `AgentAction` an `Env.step` takes."""
    calls = [
        ToolCall(
            name=c["function"]["name"], arguments=c["function"]["arguments"], id=c.get("id", "")
        )
        for c in message.get("tool_calls") or []
    ]
    return AgentAction(
        text=message.get("content") or "",
        tool_calls=calls,
        parse_errors=list(message.get("parse_errors") or []),
        raw=message.get("content") or "",
    )


class OpenAIPolicy:
    """Message-level agent backed by an OpenAI-compatible chat endpoint. When the endpoint's
    retries are spent, `act` raises `RunFailure` (an evaluated agent that cannot answer stops the
    evaluation), or what `when_spent(error)` returns (the user seat's fixed agent: a masked
    trajectory)."""

    def __init__(
        self,
        endpoint: ChatEndpoint,
        *,
        temperature: float = 0.0,
        top_p: float = 1.0,
        top_k: int = 0,
        max_tokens: int = 512,
        tool_parser: ParserName = "auto",
        when_spent: Any = None,
    ) -> None:
        self.endpoint, self.max_tokens, self.tool_parser = endpoint, max_tokens, tool_parser
        self.when_spent = when_spent or (lambda err: RunFailure(str(err)))
        self.temperature, self.top_p, self.top_k = temperature, top_p, top_k

    @classmethod
    def from_config(
        cls, rollout_cfg: Any, model: str, tool_parser: ParserName = "auto"
    ) -> OpenAIPolicy:
        """Build from the recipe's `rollout` section (its endpoint: `rollout.openai`); `model` is
        the served model's name."""
        cfg = rollout_cfg.openai
        base_url = cfg.resolved_base_url()
        if base_url is None and not os.environ.get(cfg.api_key_env):
            raise UsageError(
                f"rollout.engine=openai talks to the OpenAI API but ${cfg.api_key_env} is "
                "not set; export it, or set rollout.openai.base_url to your server"
            )
        endpoint = ChatEndpoint.for_config(
            cfg,
            base_url=base_url or OPENAI_API_URL,
            model=model,
            label="agent endpoint",
            base_url_setting="rollout.openai.base_url",
        )
        return cls(
            endpoint,
            temperature=rollout_cfg.temperature,
            top_p=rollout_cfg.top_p,
            top_k=rollout_cfg.top_k,
            max_tokens=rollout_cfg.max_new_tokens_per_turn,
            tool_parser=tool_parser,
        )

    @property
    def counters(self) -> dict[str, int]:
        return dict(self.endpoint.counts)

    async def act(
        self, messages: list[dict], tools: list[dict] | None = None, request: dict | None = None
    ) -> dict:
        """`request`: fields the env adds to the body (`ResetResult.request`, e.g. a seed)."""
        kwargs: dict[str, Any] = {
            "temperature": self.temperature,
            "top_p": self.top_p,
            "max_tokens": self.max_tokens,
        }
        if tools:
            kwargs["tools"] = tools
        if self.top_k > 0:  # not part of the OpenAI API; vLLM and SGLang read it from the body
            kwargs["top_k"] = self.top_k
        kwargs.update(request or {})
        try:
            reply, _ = await self.endpoint.chat(to_wire_messages(messages), **kwargs)
        except UserFailure as err:
            raise self.when_spent(err) from None
        return message_from_reply(reply, self.tool_parser, tools)

    def as_message_policy(self, name: str = "openai agent") -> Any:
        """This agent as a `MessagePolicy` (`collect(policy=...)`)."""
        from mua.rollout.policies import MessagePolicy

        async def act(
            messages: list[dict], task: Any, tools: list[dict], request: dict | None = None
        ) -> dict:
            return await self.act(messages, tools, request)

        return MessagePolicy(act, tool_parser=self.tool_parser, name=name)

    async def aclose(self) -> None:
        await self.endpoint.aclose()
