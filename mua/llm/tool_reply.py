"""Tool calls in an LLM user's or judge's reply: `ToolReply` and `read_tool_reply`.

Structured `tool_calls` are read always; calls written in text only with `user.tool_parser` set
(a family name, as `model.tool_parser`). The readers live above this layer (`mua.families`), which
hands them in with `register_readers` when imported.
Not here: sending the request (`mua.llm.chat_endpoint`), what a gym does with the calls.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

# (text, parser, tools) -> an action with `text`, `tool_calls` (name, arguments, id), `parse_errors`
_TEXT_READER: Callable[[str, str, list[dict] | None], Any] | None = None
# raw structured calls -> (mua call dicts, errors)
_NATIVE_READER: Callable[[list[Any]], tuple[list[dict], list[str]]] | None = None


@dataclass
class ToolReply:
    """A user's or judge's answer: its text and its calls, as mua's assistant messages hold
    them (`{"id", "type": "function", "function": {"name", "arguments": {...}}}`)."""

    text: str
    tool_calls: list[dict] = field(default_factory=list)

    def to_json(self) -> str:
        return json.dumps({"text": self.text, "tool_calls": self.tool_calls}, ensure_ascii=False)

    @classmethod
    def from_json(cls, raw: str) -> ToolReply:
        """A cached reply; ValueError when it is not one."""
        value = json.loads(raw)
        if not isinstance(value, dict) or not isinstance(value.get("text"), str):
            raise ValueError("not a cached tool reply")
        calls = value.get("tool_calls")
        if not isinstance(calls, list) or not all(isinstance(c, dict) for c in calls):
            raise ValueError("not a cached tool reply")
        return cls(value["text"], calls)


def register_readers(
    text_reader: Callable[[str, str, list[dict] | None], Any],
    native_reader: Callable[[list[Any]], tuple[list[dict], list[str]]],
) -> None:
    """Called by `mua.families.tool_calls` when it is imported."""
    global _TEXT_READER, _NATIVE_READER
    _TEXT_READER, _NATIVE_READER = text_reader, native_reader


def _readers():
    if _TEXT_READER is None or _NATIVE_READER is None:
        raise RuntimeError(
            "tool-call readers are not loaded: import mua.families.tool_calls before asking an "
            "LLM user or judge for tool calls"
        )
    return _TEXT_READER, _NATIVE_READER


def read_tool_reply(message: Any, parser: str | None, tools: list[dict] | None) -> ToolReply:
    """The reply's text and calls: its structured calls when it has any, else (with `parser`)
    the calls written in its text. ValueError for a call that cannot be read, so the endpoint
    retries the request as a malformed reply."""
    content = getattr(message, "content", None)
    content = content if isinstance(content, str) else ""
    raw_calls = getattr(message, "tool_calls", None) or []
    text_reader, native_reader = _readers()
    if raw_calls:
        calls, errors = native_reader(raw_calls)
        if errors:
            raise ValueError(f"unreadable tool call: {errors[0]}")
        return ToolReply(content, calls)
    if not parser:
        return ToolReply(content)
    action = text_reader(content, parser, tools)
    if action.parse_errors:
        raise ValueError(f"unreadable {parser} tool call in the text: {action.parse_errors[0]}")
    calls = [
        {
            "id": call.id or f"call_{i}",
            "type": "function",
            "function": {"name": call.name, "arguments": call.arguments},
        }
        for i, call in enumerate(action.tool_calls)
    ]
    return ToolReply(action.text if calls else content, calls)
