"""Mistral tool calls: `[TOOL_CALLS]` followed by a JSON list of `{"name", "arguments", "id"}`.

Text before `[TOOL_CALLS]` is the turn's text; after the list only whitespace may follow (the
turn ends with `</s>`, which the runner strips). A model-written id of nine letters or digits is
kept; other calls get a nine-character id, as Mistral's template requires of every call id.
Not here: the later `[TOOL_CALLS]NAME[ARGS]{json}` layout of newer Mistral tokenizers.
"""

from __future__ import annotations

import json

from mua.families.common import call_from_object, snippet
from mua.families.json_calls import json_limit
from mua.gym.api import AgentAction, ToolCall

TAG = "[TOOL_CALLS]"
_USAGE = 'write [TOOL_CALLS][{"name": ..., "arguments": {...}}]'


def call_id(index: int, given: object = None) -> str:
    """The call's id: the model's own when it is nine letters or digits, else `call` + 5 digits."""
    if isinstance(given, str) and len(given) == 9 and given.isalnum():
        return given
    return f"call{index:05d}"


def _read_list(body: str, first: int) -> tuple[list[ToolCall], list[str]]:
    body = body.strip()
    try:
        value, end = json.JSONDecoder().raw_decode(body)
    except json.JSONDecodeError as e:
        return [], [
            f"{TAG} is not followed by valid JSON ({e.msg} at char {e.pos}): {snippet(body)}"
        ]
    except (ValueError, RecursionError) as e:
        return [], [f"{TAG} is followed by unusable JSON ({json_limit(e)})"]
    if body[end:].strip():
        return [], [f"unexpected text after the {TAG} list: {snippet(body[end:])}"]
    items = value if isinstance(value, list) else [value]
    if not items:
        return [], [f"{TAG} with an empty list; {_USAGE}"]
    calls, errors = [], []
    for item in items:
        call, err = call_from_object(item, first + len(calls) + len(errors))
        if call is None:
            errors.append(err)
            continue
        call.id = call_id(first + len(calls), item.get("id"))
        calls.append(call)
    return calls, errors


def parse(text: str, tools: list[dict] | None = None) -> AgentAction:
    """The calls after each `[TOOL_CALLS]` of the turn."""
    parts = text.split(TAG)
    calls: list[ToolCall] = []
    errors: list[str] = []
    for body in parts[1:]:
        found, bad = _read_list(body, len(calls) + len(errors))
        calls += found
        errors += bad
    return AgentAction(text=parts[0].strip(), tool_calls=calls, parse_errors=errors, raw=text)


def template_messages(messages: list[dict]) -> list[dict]:
    """Messages as Mistral's template needs them: every call and every tool result carries a
    nine-character id. Calls without one get `call_id(n)`; a tool result without one takes the
    id of the next unanswered call, in order."""
    out, pending, count = [], [], 0
    for msg in messages:
        if msg.get("tool_calls"):
            calls = []
            for call in msg["tool_calls"]:
                ident = call_id(count, call.get("id"))
                count += 1
                pending.append(ident)
                calls.append(dict(call, id=ident))
            msg = dict(msg, tool_calls=calls)
        elif msg.get("role") == "tool":
            given = msg.get("tool_call_id")
            if isinstance(given, str) and len(given) == 9:
                if given in pending:
                    pending.remove(given)
            elif pending:
                msg = dict(msg, tool_call_id=pending.pop(0))
        out.append(msg)
    return out
