"""Llama 3.x tool calls: bare JSON objects (`{"name": ..., "parameters": {...}}`), optionally
after `<|python_tag|>`, several separated by `;` or newlines.

JSON wrapped in Hermes `<tool_call>` tags is another family's format: it is a parse error, not
read. Llama's built-in tool syntax (`<|python_tag|>brave_search.call(...)`) is not read either.
Without a Llama chat template `auto` never picks this reader (a plain JSON answer would read as
a call).
"""

from __future__ import annotations

import json
import re

from mua.families.common import split_think
from mua.families.json_calls import call_from_object, json_limit, masked_think, snippet
from mua.gym.api import AgentAction, ToolCall

_PYTHON_TAG = "<|python_tag|>"
_LLAMA_END_MARKERS = ("<|eom_id|>", "<|eot_id|>")
_LLAMA_CALL_START = re.compile(
    r'<\|python_tag\|>|(?:^|(?<=;))[ \t]*(?=\{\s*"(?:name|parameters|arguments)"\s*:)', re.M
)
_LLAMA_RESUME = re.compile(r"[\n;][ \t]*\{")


def read_json_calls(
    visible: str, pos: int, first_index: int
) -> tuple[list[ToolCall], list[str], int]:
    """Llama-3 JSON calls from `pos`, separated by `;` and/or whitespace, up to the first text.

    Returns (calls, errors, where the text after them starts). An object that is not valid JSON
    is an error; reading resumes at the next line or `;` that opens an object.
    """
    calls: list[ToolCall] = []
    errors: list[str] = []
    decoder = json.JSONDecoder()
    while True:
        start = pos
        while start < len(visible) and (visible[start].isspace() or visible[start] == ";"):
            start += 1
        if start >= len(visible) or visible[start] != "{":
            return calls, errors, start
        try:
            obj, pos = decoder.raw_decode(visible, start)
        except (ValueError, RecursionError) as e:
            if isinstance(e, json.JSONDecodeError):
                what = f"not valid JSON ({e.msg} at char {e.pos - start})"
            else:
                what = f"not usable JSON ({json_limit(e)})"
            errors.append(f"tool call is {what}: {snippet(visible[start:])}")
            resume = _LLAMA_RESUME.search(visible, start + 1)
            pos = resume.start() + 1 if resume else len(visible)
            continue
        call, err = call_from_object(obj, first_index + len(calls) + len(errors))
        if call is not None:
            calls.append(call)
        else:
            errors.append(err)


def parse_llama3_json(text: str) -> AgentAction:
    """Llama-3.x native calls: bare `{"name": ..., "parameters": {...}}` objects.

    A call starts at `<|python_tag|>` or at a line (or `;`) that opens an object whose first key
    is name/parameters/arguments; several calls are separated by `;` or newlines. Text before,
    between and after the calls is the turn's text; a trailing `<|eom_id|>`/`<|eot_id|>` is
    dropped. `<|python_tag|>` followed by anything but JSON (built-in tool syntax) is an error.
    """
    body = text
    for end_marker in _LLAMA_END_MARKERS:
        body = body.rstrip().removesuffix(end_marker)
    visible = masked_think(body)
    calls: list[ToolCall] = []
    errors: list[str] = []
    outside: list[str] = []
    pos = 0
    while (start := _LLAMA_CALL_START.search(visible, pos)) is not None:
        tagged = start.group(0) == _PYTHON_TAG
        # an untagged match ends where its object opens (the blanks before it may be a think block)
        outside.append(body[pos : start.start() if tagged else start.end()].rstrip(" \t"))
        found, bad, pos = read_json_calls(visible, start.end(), len(calls) + len(errors))
        if tagged and not found and not bad:
            bad = [f"expected a JSON tool call after {_PYTHON_TAG}: {snippet(visible[pos:])}"]
        calls += found
        errors += bad
    outside.append(body[pos:])
    return AgentAction(
        text="".join(outside).strip(), tool_calls=calls, parse_errors=errors, raw=text
    )


def parse(text: str, tools: list[dict] | None = None) -> AgentAction:
    """Llama-3 JSON calls; `<tool_call>` markup makes the turn one parse error."""
    _, rest, _ = split_think(text)
    if "<tool_call>" in rest or "</tool_call>" in rest:
        return AgentAction(
            text=text.strip(),
            parse_errors=[
                '<tool_call> markup is not this model\'s format; write {"name": ..., '
                '"parameters": {...}} on its own'
            ],
            raw=text,
        )
    return parse_llama3_json(text)
