"""Kimi-K2 tool calls: one `<|tool_calls_section_begin|>` ... `<|tool_calls_section_end|>`
section of `<|tool_call_begin|>functions.NAME:IDX<|tool_call_argument_begin|>{json}<|tool_call_end|>`.

The name is the id's text between `functions.` and its last `:`; arguments are one JSON object.
Text outside the section is the turn's text. Not here: the ids the template writes for results
(it builds them itself from name and position).
"""

from __future__ import annotations

from mua.families.common import call_from_json, section_calls, snippet, tagged_calls
from mua.gym.api import AgentAction, ToolCall

SECTION = ("<|tool_calls_section_begin|>", "<|tool_calls_section_end|>")
CALL = ("<|tool_call_begin|>", "<|tool_call_end|>")
ARGS = "<|tool_call_argument_begin|>"


def _read_call(body: str, index: int) -> tuple[ToolCall | None, str | None]:
    ident, sep, args = body.partition(ARGS)
    if not sep:
        return None, f"tool call without {ARGS}: {snippet(body)}"
    ident = ident.strip()
    name, colon, position = ident.removeprefix("functions.").rpartition(":")
    if not colon or not position.isdigit() or not name.strip():
        return None, f"tool call id must be functions.NAME:INDEX, got {snippet(ident)!r}"
    return call_from_json(name.strip(), args, index)


def parse(text: str, tools: list[dict] | None = None) -> AgentAction:
    """The calls of every tool-call section of the turn."""
    return tagged_calls(text, *SECTION, lambda body, i: section_calls(body, *CALL, _read_call, i))
