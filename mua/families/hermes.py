"""Hermes / Qwen3 tool calls: `<tool_call>{json}</tool_call>` blocks, several per turn.

A block without its close is a parse error and is not read; reasoning is never read for calls.
Not here: choosing the family (`mua.families.tool_calls.parse_action`).
"""

from __future__ import annotations

import json
import re

from mua.families.json_calls import (
    call_from_object,
    json_limit,
    outside_think,
    snippet,
    strip_think,
    unclosed_error,
)
from mua.gym.api import AgentAction, ToolCall

TOOL_BLOCK = re.compile(r"<tool_call>(.*?)(</tool_call>|(?=<tool_call>)|$)", re.S)


def decode_call(body: str, index: int) -> tuple[ToolCall | None, str | None]:
    """One `<tool_call>` body -> (call, None) or (None, what was wrong)."""
    body = body.strip()
    if body.startswith("```"):
        body = body.strip("`").removeprefix("json").strip()
    if not body:
        return (
            None,
            'empty <tool_call> block; write <tool_call>{"name": ..., "arguments": {...}}</tool_call>',
        )
    try:
        obj, end = json.JSONDecoder().raw_decode(body)
    except json.JSONDecodeError as e:
        return None, f"tool call is not valid JSON ({e.msg} at char {e.pos}): {snippet(body)}"
    except (ValueError, RecursionError) as e:
        return None, f"tool call is not usable JSON ({json_limit(e)}): {snippet(body)}"
    if body[end:].strip():
        return None, f"unexpected text after the JSON object in <tool_call>: {snippet(body[end:])}"
    return call_from_object(obj, index)


def parse_hermes(text: str) -> AgentAction:
    """Every `<tool_call>...</tool_call>` block (several per turn); a block without its close is
    a parse error, not read."""
    visible = strip_think(text)
    calls: list[ToolCall] = []
    errors: list[str] = []
    for i, match in enumerate(TOOL_BLOCK.finditer(visible)):
        if not match.group(2):
            errors.append(unclosed_error("<tool_call>", "</tool_call>"))
            continue
        call, err = decode_call(match.group(1), i)
        if call is not None:
            calls.append(call)
        else:
            errors.append(err)
    stray_close = visible.count("</tool_call>") - visible.count("<tool_call>")
    if stray_close > 0:
        errors.append("found </tool_call> without a matching <tool_call>")
    outside = outside_think(text, lambda part: TOOL_BLOCK.sub("", part).replace("</tool_call>", ""))
    return AgentAction(text=outside.strip(), tool_calls=calls, parse_errors=errors, raw=text)
