"""GLM-4.5 / 4.6 tool calls: `<tool_call>NAME` then `<arg_key>K</arg_key><arg_value>V</arg_value>`
pairs, then `</tool_call>`.

Whitespace between the tags is free. A value is raw text, typed with the tool's JSON schema
(`common.schema_value`: strings stay as written, other types are JSON). Reasoning
(`<think>...</think>`) is never read for calls; text outside calls is the turn's text.
Not here: the Qwen3 JSON body that shares the `<tool_call>` tag (`hermes`) is an error here.
"""

from __future__ import annotations

import re

from mua.families.common import one_call, snippet, tagged_calls, text_call
from mua.gym.api import AgentAction, ToolCall

_PAIR = re.compile(r"\s*<arg_key>(.*?)</arg_key>\s*<arg_value>(.*?)</arg_value>", re.S)
_NAME = re.compile(r"[A-Za-z_][\w.\-]*")
_TAGS = ("<arg_key>", "<arg_value>")  # never inside a key or value: a close is missing
_USAGE = "write <tool_call>NAME<arg_key>KEY</arg_key><arg_value>VALUE</arg_value></tool_call>"


def _read_call(body: str, index: int, tools: list[dict] | None) -> tuple[ToolCall | None, str]:
    head, sep, _ = body.partition("<arg_key>")
    name = head.strip()
    if not _NAME.fullmatch(name):
        return None, f"<tool_call> must start with a tool name; {_USAGE}: {snippet(body)}"
    return text_call(name, body[len(head) :], _PAIR, tools, _USAGE, index, tags=_TAGS)


def parse(text: str, tools: list[dict] | None = None) -> AgentAction:
    """Every `<tool_call>` block of the turn (an unclosed one is a parse error, not read)."""
    return tagged_calls(
        text, "<tool_call>", "</tool_call>", lambda body, i: one_call(_read_call(body, i, tools))
    )
