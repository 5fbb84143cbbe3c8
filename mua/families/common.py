"""Pieces every family's tool-call reader shares: reasoning split-off, JSON call decoding, the
finished `AgentAction`, and schema-typed argument values.

A family module finds its own markup; these helpers turn what it found into `ToolCall`s or
parse errors worded for the model. Nothing here knows a family's tokens, and nothing raises on
model text: every failure becomes an error string.
"""

from __future__ import annotations

import json
import re
from typing import Any

from mua.families.json_calls import call_from_object, json_limit, snippet, unclosed_error
from mua.gym.api import AgentAction, ToolCall

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"

__all__ = [
    "THINK_CLOSE",
    "THINK_OPEN",
    "action",
    "call_from_json",
    "call_from_object",
    "schema_value",
    "snippet",
    "text_arguments",
    "text_call",
    "one_call",
    "read_blocks",
    "section_calls",
    "split_think",
    "tagged_calls",
]


def split_think(text: str) -> tuple[str, str, bool]:
    """(reasoning, rest, reasoning_first): reasoning is never read for calls.

    Reasoning is everything up to the last `</think>` (templates that open `<think>` in the
    generation prompt leave only the close in the output), or, with no close, everything from
    an unclosed `<think>` on (a turn cut inside its reasoning); `reasoning_first` says on which
    side of `rest` it was.
    """
    end = text.rfind(THINK_CLOSE)
    if end >= 0:
        cut = end + len(THINK_CLOSE)
        return text[:cut], text[cut:], True
    start = text.find(THINK_OPEN)
    if start >= 0:
        return text[start:], text[:start], False
    return "", text, True


def action(
    raw: str,
    reasoning: str,
    reasoning_first: bool,
    outside: str,
    calls: list[ToolCall],
    errors: list[str],
) -> AgentAction:
    """The turn's action: text is the reasoning (verbatim) and the text outside call markup."""
    text = reasoning + outside if reasoning_first else outside + reasoning
    return AgentAction(text=text.strip(), tool_calls=calls, parse_errors=errors, raw=raw)


def call_from_json(name: str, body: str, index: int) -> tuple[ToolCall | None, str | None]:
    """A call whose name is markup and whose arguments are one JSON object (`body`)."""
    body = body.strip()
    if not body:  # a call cut where its arguments begin, or written without them
        return None, f"arguments of {name!r} are missing; write a JSON object ({{}} for none)"
    try:
        args, end = json.JSONDecoder().raw_decode(body)
    except json.JSONDecodeError as e:
        return None, (
            f"arguments of {name!r} are not valid JSON ({e.msg} at char {e.pos}): {snippet(body)}"
        )
    except (ValueError, RecursionError) as e:
        return None, f"arguments of {name!r} are not usable JSON ({json_limit(e)})"
    if body[end:].strip():
        return None, f"unexpected text after the arguments of {name!r}: {snippet(body[end:])}"
    if not isinstance(args, dict):
        return None, f"arguments of {name!r} must be a JSON object, got {type(args).__name__}"
    return call_from_object({"name": name, "arguments": args}, index)


def _tool_properties(tools: list[dict] | None, name: str) -> dict | None:
    for tool in tools or []:
        fn = tool.get("function", tool) if isinstance(tool, dict) else None
        if isinstance(fn, dict) and fn.get("name") == name:
            props = (fn.get("parameters") or {}).get("properties")
            return props if isinstance(props, dict) else None
    return None


def _types(schema: Any) -> list[str]:
    if not isinstance(schema, dict):
        return []
    kind = schema.get("type")
    if isinstance(kind, str):
        return [kind]
    if isinstance(kind, list):
        return [k for k in kind if isinstance(k, str)]
    for key in ("anyOf", "oneOf"):
        if isinstance(schema.get(key), list):
            return [t for option in schema[key] for t in _types(option)]
    return []


def _as_json(raw: str) -> tuple[bool, Any]:
    try:
        return True, json.loads(raw)
    except (ValueError, RecursionError):
        return False, None


def _as_type(raw: str, kind: str) -> tuple[bool, Any]:
    """Read `raw` as JSON-schema type `kind`: (it fits, the value)."""
    text = raw.strip()
    if kind == "string":
        return True, raw
    if kind == "boolean":  # Jinja writes Python's True/False
        low = text.lower()
        return (low in ("true", "false")), low == "true"
    if kind == "null":
        return (text.lower() in ("null", "none")), None
    ok, value = _as_json(text)
    if kind == "integer":
        if ok and isinstance(value, float) and value.is_integer():
            value = int(value)
        return ok and isinstance(value, int) and not isinstance(value, bool), value
    if kind == "number":
        return ok and isinstance(value, (int, float)) and not isinstance(value, bool), value
    if kind == "object":
        return ok and isinstance(value, dict), value
    if kind == "array":
        return ok and isinstance(value, list), value
    return False, None


def schema_value(raw: str, tool: str, key: str, tools: list[dict] | None) -> Any:
    """A parameter value written as text (XML and GLM formats), typed as the tool declares.

    With a declared type (or a list of them, non-string types tried first) the value is read as
    that type; a value that fits none stays the string it was (the tool's own argument check
    then reports it). Without a schema for this key: JSON when the text is JSON, else the string.
    """
    props = _tool_properties(tools, tool)
    kinds = _types(props.get(key)) if props else []
    if not kinds:
        ok, value = _as_json(raw.strip())
        return value if ok else raw
    for kind in sorted(kinds, key=lambda k: k == "string"):
        ok, value = _as_type(raw, kind)
        if ok:
            return value
    return raw


def text_arguments(
    inner: str,
    pattern: re.Pattern,
    tool: str,
    tools: list[dict] | None,
    layout=None,
    read=None,
    tags: tuple[str, ...] = (),
) -> tuple[dict | None, str]:
    """Arguments written as text key/value pairs (`pattern` groups 1 and 2, matched back to
    back from the start of `inner`), typed by `schema_value` after `layout` (the format's own
    spacing around a value) is taken off, or by `read(match) -> (ok, value or error)` for a
    format that says a value's type itself. A pair holding one of `tags` (the format's argument
    markup) twice ran into the next argument past a missing or misspelled close: an error.
    Returns (arguments, the unread rest) or (None, error)."""
    args: dict = {}
    pos = 0
    for m in pattern.finditer(inner):
        if inner[pos : m.start()].strip():
            break
        key = m.group(1).strip()
        swallowed = _swallowed(m.group(0), key, tool, tags)
        if swallowed:
            return None, swallowed
        if not key:
            return None, f"an argument of {tool!r} has no name"
        if key in args:
            return None, f"argument {key!r} of {tool!r} is given twice"
        if read is not None:
            ok, value = read(m)
            if not ok:
                return None, value
            args[key] = value
        else:
            raw = layout(m.group(2)) if layout else m.group(2)
            args[key] = schema_value(raw, tool, key, tools)
        pos = m.end()
    return args, inner[pos:]


def _swallowed(pair: str, key: str, tool: str, tags: tuple[str, ...]) -> str:
    """The error for a matched key/value `pair` that holds one of `tags` more than once (it ran
    into the next argument), else ''."""
    for tag in tags:
        if pair.count(tag) > 1:
            name = key.split("<", 1)[0].strip()
            return (
                f"argument {snippet(name)!r} of {tool!r} contains {tag}: its closing tag is "
                "missing or misspelled"
            )
    return ""


def text_call(
    name: str, inner: str, pattern: re.Pattern, tools, usage: str, index: int, **how
) -> tuple[ToolCall | None, str]:
    """The call `name` whose whole `inner` is text key/value pairs (`text_arguments`, with
    `how` its `layout`/`read`/`tags`); anything else left in `inner` is an error quoting `usage`."""
    args, rest = text_arguments(inner, pattern, name, tools, **how)
    if args is None:
        return None, rest
    if rest.strip():
        return None, f"unreadable arguments of {name!r}; {usage}: {snippet(rest)}"
    return ToolCall(name=name, arguments=args, id=f"call_{index}"), ""


def one_call(found: tuple[ToolCall | None, str | None]) -> tuple[list[ToolCall], list[str]]:
    """(call, error) -> ([call], []) or ([], [error])."""
    call, err = found
    return ([call], []) if call is not None else ([], [err or "unreadable tool call"])


def _blocks(open_tag: str, close_tag: str) -> re.Pattern:
    o, c = re.escape(open_tag), re.escape(close_tag)
    return re.compile(f"{o}(.*?)({c}|(?={o})|$)", re.S)


def read_blocks(
    text: str, open_tag: str, close_tag: str, read, first_index: int = 0
) -> tuple[list[ToolCall], list[str], str]:
    """Every `open_tag ... close_tag` block of `text`, read by `read(body, index)` -> (calls,
    errors). A block without its `close_tag` (a turn cut inside it, or a misspelled close) is
    one error and is not read: a call is read only when complete. A stray close is an error.
    Returns (calls, errors, the text outside the blocks)."""
    block = _blocks(open_tag, close_tag)
    calls: list[ToolCall] = []
    errors: list[str] = []
    for m in block.finditer(text):
        if not m.group(2):
            errors.append(unclosed_error(open_tag, close_tag))
            continue
        found, bad = read(m.group(1), first_index + len(calls) + len(errors))
        calls += found
        errors += bad
    if text.count(close_tag) > text.count(open_tag):
        errors.append(f"found {close_tag} without a matching {open_tag}")
    return calls, errors, block.sub("", text).replace(close_tag, "")


def tagged_calls(text: str, open_tag: str, close_tag: str, read) -> AgentAction:
    """The turn's action when its calls are `open_tag ... close_tag` blocks outside reasoning
    (`read` as for `read_blocks`)."""
    reasoning, rest, first = split_think(text)
    calls, errors, outside = read_blocks(rest, open_tag, close_tag, read)
    return action(text, reasoning, first, outside, calls, errors)


def section_calls(
    body: str, call_open: str, call_close: str, read_one, first_index: int
) -> tuple[list[ToolCall], list[str]]:
    """The calls of one tool-call section: `call_open ... call_close` blocks read by
    `read_one(body, index)` -> (call, error), with nothing but whitespace between them."""
    calls, errors, between = read_blocks(
        body, call_open, call_close, lambda b, i: one_call(read_one(b, i)), first_index
    )
    if between.strip():
        errors.append(f"unexpected text between tool calls: {snippet(between)}")
    elif not calls and not errors:
        errors.append(f"a tool-call section without a call; write {call_open}...{call_close}")
    return calls, errors
