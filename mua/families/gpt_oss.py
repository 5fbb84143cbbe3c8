"""gpt-oss tool calls and channels (harmony): messages `<|channel|>NAME<|message|>BODY<|end|>`.

A turn is harmony messages joined by `<|start|>assistant`; one addressed to `functions.NAME` is a
call whose body up to `<|call|>` is a JSON object. The turn's text is its `final` (or
recipient-less `commentary`) bodies, else its `analysis`. Another recipient (built-in browser or
python) is a parse error; text with no harmony markup is plain text.
"""

from __future__ import annotations

import re

from mua.families.common import call_from_json, snippet
from mua.gym.api import AgentAction, ToolCall

_ENDS = re.compile(r"<\|(?:end|call|return)\|>")
_RECIPIENT = re.compile(r"\bto=([^\s<]+)")
_CHANNEL = re.compile(r"<\|channel\|>\s*(\w+)")
_MARKUP = ("<|channel|>", "<|message|>", "<|start|>")


def _messages(text: str):
    """(header, body) per harmony message; header None for text outside any message."""
    for chunk in text.split("<|start|>"):
        if not chunk.strip():
            continue
        head, sep, rest = chunk.partition("<|message|>")
        if not sep:
            yield None, chunk
            continue
        end = _ENDS.search(rest)
        body = rest[: end.start()] if end else rest
        yield head.removeprefix("assistant"), body
        tail = rest[end.end() :] if end else ""
        if tail.strip():
            yield None, tail


def parse(text: str, tools: list[dict] | None = None) -> AgentAction:
    """The turn's calls (one per message addressed to `functions.*`) and its text."""
    if not any(tag in text for tag in _MARKUP):
        return AgentAction(text=_ENDS.sub("", text).strip(), raw=text)
    calls: list[ToolCall] = []
    errors: list[str] = []
    final: list[str] = []
    analysis: list[str] = []
    for header, body in _messages(text):
        if header is None:
            errors.append(f"text outside a harmony message: {snippet(body)}")
            continue
        to = _RECIPIENT.search(header)
        channel = _CHANNEL.search(header)
        channel_name = channel.group(1) if channel else ""
        if to is not None:
            recipient = to.group(1)
            if not recipient.startswith("functions.") or not recipient[10:]:
                errors.append(f"unknown recipient {recipient!r}; address calls to functions.NAME")
                continue
            call, err = call_from_json(recipient[10:], body, len(calls) + len(errors))
            if call is None:
                errors.append(err)
            else:
                calls.append(call)
        elif channel_name == "analysis":
            analysis.append(body)
        elif channel_name in ("final", "commentary"):
            final.append(body)
        else:
            errors.append(f"harmony message without a known channel: {snippet(header)}")
    kept = final or analysis
    return AgentAction(
        text="\n".join(kept).strip(), tool_calls=calls, parse_errors=errors, raw=text
    )
