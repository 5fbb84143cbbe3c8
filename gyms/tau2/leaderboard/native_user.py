"""The LLM user under `profile: leaderboard`: tau2's request, tools called natively.

`NativeUser(llm, env, opening, seed)` starts from `profile.user_opening` (tau2's system message;
the greeting arrives as the first `reply`) and sends the user's tools (telecom) in the request's
`tools` field with `tool_choice: "auto"`, and the trial's `seed` in every request, as tau2's
user simulator does. A reply with tool calls is run on the user's side
(`Tau2Environment.tool_call("user", ...)`, every call of the message, as tau2's orchestrator
runs them) and the results go back as `tool` messages; the model is asked again until it
answers with text. Its history is kept as tau2 keeps it with roles flipped: its own messages
are `assistant` (with `tool_calls`), the agent's are `user`.

It needs mua's `LLMClient` (its `endpoint.chat` accepts `tools`); replies are not cached. With
`user.tool_parser` set, a reply whose calls are written in its text (a raw open model behind a
plain completion server) is read with that family's reader (`mua.llm.tool_reply`).
`MAX_USER_TOOL_ROUNDS` bounds a user that never stops calling tools (the conversation then
ends as a user stop, as the text-convention user does). Not here: the text-convention user
(users.py), the agent side.
"""

from __future__ import annotations

import json

from gyms.tau2.domain import USER
from gyms.tau2.leaderboard.profile import request_fields
from gyms.tau2.users import STOP, UserTurn
from mua.errors import UsageError
from mua.llm.tool_reply import read_tool_reply

MAX_USER_TOOL_ROUNDS = 10


def _calls(message) -> list[dict]:
    out = []
    for i, call in enumerate(getattr(message, "tool_calls", None) or []):
        function = call.function
        try:
            arguments = json.loads(function.arguments or "{}")
        except (TypeError, ValueError):
            arguments = None
        out.append({"id": call.id or f"call_{i}", "name": function.name, "arguments": arguments})
    return out


def _usable(message) -> tuple[str | None, list[dict]]:
    calls = _calls(message)
    if calls or (isinstance(message.content, str) and message.content.strip()):
        return message.content, calls
    raise ValueError("empty reply (no text and no tool calls)")


def _read_with(parser: str, tools: list[dict] | None):
    """A reply's text and calls, calls written in the text read with `parser`'s family."""

    def parse(message) -> tuple[str | None, list[dict]]:
        reply = read_tool_reply(message, parser, tools)
        calls = [
            {"id": c["id"], "name": c["function"]["name"], "arguments": c["function"]["arguments"]}
            for c in reply.tool_calls
        ]
        if not calls and not reply.text.strip():
            raise ValueError("empty reply (no text and no tool calls)")
        return (reply.text if calls else message.content), calls

    return parse


class NativeUser:
    def __init__(self, llm, env, opening: dict, seed: int):
        endpoint = getattr(llm, "endpoint", None)
        if endpoint is None or not hasattr(endpoint, "chat"):
            raise UsageError(
                "tau2: profile leaderboard needs an OpenAI-compatible LLM user (user.kind: llm "
                "with base_url/model) so the user can call its tools natively"
            )
        self.llm, self.endpoint, self.env = llm, endpoint, env
        self.messages = [opening["messages"][0]]
        self.tools = opening["tools"]
        self.extra = request_fields(seed, self.tools)
        self.first_request: dict | None = None

    def _request(self) -> dict:
        body = {"messages": [dict(m) for m in self.messages]}
        if self.tools:
            body["tools"] = self.tools
        return {**body, **self.extra}

    async def _ask(self) -> tuple[str | None, list[dict]]:
        """The model's reply: its text and its calls (`{"id", "name", "arguments"}`)."""
        body = self._request()
        if self.first_request is None:
            self.first_request = body
        cfg = getattr(self.llm, "cfg", None)
        kwargs = {k: v for k, v in body.items() if k != "messages"}
        if cfg is not None:
            kwargs.update(temperature=cfg.temperature, max_tokens=cfg.max_tokens)
        parser = getattr(cfg, "tool_parser", None)
        parse = _read_with(parser, self.tools) if parser else _usable
        _, reply = await self.endpoint.chat(body["messages"], parse=parse, **kwargs)
        return reply

    async def reply(self, agent_text: str) -> UserTurn:
        self.messages.append({"role": "user", "content": agent_text})
        made = []
        for _ in range(MAX_USER_TOOL_ROUNDS + 1):
            content, calls = await self._ask()
            if not calls:
                self.messages.append({"role": "assistant", "content": content, "tool_calls": None})
                return UserTurn(content, made)
            if len(made) >= MAX_USER_TOOL_ROUNDS:
                return UserTurn(STOP, made)
            self.messages.append(
                {
                    "role": "assistant",
                    "content": content,
                    "tool_calls": [
                        {
                            "id": c["id"],
                            "name": c["name"],
                            "function": {
                                "name": c["name"],
                                "arguments": json.dumps(c["arguments"]),
                            },
                            "type": "function",
                        }
                        for c in calls
                    ],
                }
            )
            for call in calls:
                arguments = call["arguments"] if isinstance(call["arguments"], dict) else {}
                content, _error = self.env.tool_call(USER, call["name"], arguments)
                made.append({"requestor": USER, "name": call["name"], "arguments": arguments})
                self.messages.append(
                    {"role": "tool", "content": content, "tool_call_id": call["id"]}
                )
        return UserTurn(STOP, made)
