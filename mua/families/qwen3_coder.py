"""Qwen3-Coder / Qwen3.5 tool calls: XML `<function=NAME>` with `<parameter=KEY>` blocks.

A call is `<tool_call>` `<function=NAME>` then `<parameter=KEY>`VALUE`</parameter>` per
argument, then `</function>` `</tool_call>`; whitespace between the tags is free. A VALUE is raw
text (one newline after the opening tag and one before the closing tag belong to the layout);
it is typed with the tool's JSON schema (`common.schema_value`). Text outside the calls and any
reasoning (`...</think>`) is the turn's text; calls are never read inside reasoning.
Not here: Qwen3's JSON-in-`<tool_call>` format (`hermes`).
"""

from __future__ import annotations

import re

from mua.families.common import one_call, snippet, tagged_calls, text_arguments
from mua.gym.api import AgentAction, ToolCall

_FUNCTION = re.compile(r"\s*<function=([^>\n]*)>(.*?)(?:</function>\s*$|$)", re.S)
_PARAM = re.compile(r"\s*<parameter=([^>\n]*)>(.*?)</parameter>", re.S)
_TAGS = ("<parameter=",)  # never inside a value: its </parameter> is missing or misspelled
_USAGE = "write <tool_call><function=NAME><parameter=KEY>value</parameter></function></tool_call>"


def _layout_value(raw: str) -> str:
    raw = raw.removeprefix("\n")
    return raw.removesuffix("\n")


def _read_call(body: str, index: int, tools: list[dict] | None) -> tuple[ToolCall | None, str]:
    fn = _FUNCTION.fullmatch(body)
    if fn is None or not fn.group(1).strip():
        return None, f"<tool_call> without <function=NAME>; {_USAGE}: {snippet(body)}"
    name, inner = fn.group(1).strip(), fn.group(2)
    if not body.rstrip().endswith("</function>"):
        return None, f"<function={name}> is not closed with </function>"
    args, rest = text_arguments(inner, _PARAM, name, tools, _layout_value, tags=_TAGS)
    if args is None:
        return None, rest
    if rest.strip():
        what = "unclosed <parameter>" if "<parameter=" in rest else "text between parameters"
        return None, f"{what} in <function={name}>; {_USAGE}: {snippet(rest)}"
    return ToolCall(name=name, arguments=args, id=f"call_{index}"), ""


def parse(text: str, tools: list[dict] | None = None) -> AgentAction:
    """Every `<tool_call>` block of the turn (an unclosed one is a parse error, not read)."""
    return tagged_calls(
        text, "<tool_call>", "</tool_call>", lambda body, i: one_call(_read_call(body, i, tools))
    )
