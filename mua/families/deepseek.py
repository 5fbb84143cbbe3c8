"""DeepSeek-V3.1 tool calls: `<｜tool▁calls▁begin｜>` ... `<｜tool▁calls▁end｜>` around
`<｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{json}<｜tool▁call▁end｜>` calls.

The bars are U+FF5C and the low blocks U+2581, matched exactly. Arguments are one JSON object.
Reasoning (`...</think>`) is never read for calls; text outside the section is the turn's text.
Not here: DeepSeek-V3's older `function<｜tool▁sep｜>NAME` + fenced JSON layout.
"""

from __future__ import annotations

import json

from mua.families.common import call_from_json, section_calls, snippet, tagged_calls
from mua.gym.api import AgentAction, ToolCall

SECTION = ("<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>")
CALL = ("<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>")
SEP = "<｜tool▁sep｜>"


def _read_call(body: str, index: int) -> tuple[ToolCall | None, str | None]:
    name, sep, args = body.partition(SEP)
    if not sep or not name.strip():
        return None, f"tool call must be NAME{SEP}{{json}}: {snippet(body)}"
    return call_from_json(name.strip(), args, index)


def parse(text: str, tools: list[dict] | None = None) -> AgentAction:
    """The calls of every tool-call section of the turn."""
    return tagged_calls(text, *SECTION, lambda body, i: section_calls(body, *CALL, _read_call, i))


def template_messages(messages: list[dict]) -> list[dict]:
    """Messages as DeepSeek-V3.1's template needs them: it pastes call arguments in as text,
    so dict arguments become JSON strings (written as `json.dumps` writes them)."""
    out = []
    for msg in messages:
        if msg.get("tool_calls"):
            msg = dict(msg, tool_calls=[_json_arguments(c) for c in msg["tool_calls"]])
        out.append(msg)
    return out


def _json_arguments(call: dict) -> dict:
    fn = call.get("function", call)
    args = fn.get("arguments")
    if isinstance(args, str):
        return call
    fn = dict(fn, arguments=json.dumps(args if args is not None else {}, ensure_ascii=False))
    return dict(call, function=fn) if "function" in call else fn
