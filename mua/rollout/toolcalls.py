"""Read tool calls out of a policy's text: Hermes/Qwen `<tool_call>{json}</tool_call>` blocks and
UserRL-style bracket actions (`[action] ...`, `[search] ...`, `[answer] ...`, `[finish]`).

`parse_action(text, parser)` returns a `mua.gym.AgentAction` and never raises: markup that cannot
be read lands in `AgentAction.parse_errors` with a sentence the model can act on. Bracket actions
become calls of the one tool UserRL-style gyms expose, `interact_with_env(choice, content)`.
This module does not check tool names or argument types; the gym's `ToolEnv` does that.
Reasoning inside `<think>...</think>` is never parsed for actions.
"""

from __future__ import annotations

import json
import re
from typing import Literal

from mua.gym.api import AgentAction, ToolCall

ParserName = Literal["hermes", "bracket", "auto"]
BRACKET_TOOL = "interact_with_env"
BRACKET_CHOICES = ("action", "search", "answer", "finish")

_THINK = re.compile(r"<think>.*?(</think>|$)", re.S)
_TOOL_BLOCK = re.compile(r"<tool_call>(.*?)(</tool_call>|(?=<tool_call>)|$)", re.S)
_BRACKET = re.compile(r"\[\s*(action|search|answer|finish)\s*\]", re.I)
_MAX_ERROR_SNIPPET = 60


def _snippet(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _MAX_ERROR_SNIPPET else text[: _MAX_ERROR_SNIPPET - 3] + "..."


def _strip_think(text: str) -> str:
    return _THINK.sub(" ", text)


def _outside_think(text: str, edit) -> str:
    """Apply `edit` to the parts of `text` outside think blocks, keeping think blocks verbatim."""
    out, pos = [], 0
    for m in _THINK.finditer(text):
        out.append(edit(text[pos : m.start()]))
        out.append(m.group(0))
        pos = m.end()
    out.append(edit(text[pos:]))
    return "".join(out)


def _decode_call(body: str, index: int) -> tuple[ToolCall | None, str | None]:
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
        return None, f"tool call is not valid JSON ({e.msg} at char {e.pos}): {_snippet(body)}"
    if body[end:].strip():
        return None, f"unexpected text after the JSON object in <tool_call>: {_snippet(body[end:])}"
    if not isinstance(obj, dict):
        return (
            None,
            f"tool call must be a JSON object with name and arguments, got {type(obj).__name__}",
        )
    name = obj.get("name")
    if not isinstance(name, str) or not name.strip():
        return None, 'tool call has no "name" string'
    args = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(args, str):
        try:
            args = json.loads(args) if args.strip() else {}
        except json.JSONDecodeError:
            return None, f"arguments of {name!r} are a string that is not JSON: {_snippet(args)}"
    if args is None:
        args = {}
    if not isinstance(args, dict):
        return None, f"arguments of {name!r} must be a JSON object, got {type(args).__name__}"
    return ToolCall(name=name.strip(), arguments=args, id=f"call_{index}"), None


def parse_hermes(text: str) -> AgentAction:
    """Every `<tool_call>...</tool_call>` block (several per turn; an unclosed last one is read too)."""
    visible = _strip_think(text)
    calls: list[ToolCall] = []
    errors: list[str] = []
    for i, match in enumerate(_TOOL_BLOCK.finditer(visible)):
        call, err = _decode_call(match.group(1), i)
        if call is not None:
            calls.append(call)
        else:
            errors.append(err)
    stray_close = visible.count("</tool_call>") - visible.count("<tool_call>")
    if stray_close > 0:
        errors.append("found </tool_call> without a matching <tool_call>")
    outside = _outside_think(
        text, lambda part: _TOOL_BLOCK.sub("", part).replace("</tool_call>", "")
    )
    return AgentAction(text=outside.strip(), tool_calls=calls, parse_errors=errors, raw=text)


def parse_bracket(text: str) -> AgentAction:
    """The first bracket action; its content runs to the next bracket tag or the end of the text."""
    visible = _strip_think(text)
    tags = list(_BRACKET.finditer(visible))
    if not tags:
        return AgentAction(text=text.strip(), raw=text)
    first = tags[0]
    end = tags[1].start() if len(tags) > 1 else len(visible)
    choice = first.group(1).lower()
    content = visible[first.end() : end].strip()
    if choice == "finish":
        content = ""
    call = ToolCall(
        name=BRACKET_TOOL, arguments={"choice": choice, "content": content}, id="bracket_0"
    )
    return AgentAction(text=text.strip(), tool_calls=[call], raw=text)


def parse_action(text: str, parser: ParserName = "auto") -> AgentAction:
    """Parse one assistant turn. `auto`: Hermes blocks when present, else bracket actions, else text."""
    if parser == "hermes":
        return parse_hermes(text)
    if parser == "bracket":
        return parse_bracket(text)
    if parser != "auto":
        raise ValueError(f"unknown tool parser {parser!r}; use hermes, bracket or auto")
    visible = _strip_think(text)
    if "<tool_call>" in visible or "</tool_call>" in visible:
        return parse_hermes(text)
    return parse_bracket(text)


def action_as_message(action: AgentAction) -> dict:
    """The assistant message to store for `action`.

    Plain text and bracket actions keep the text verbatim as the content (templates have no
    markup for them); Hermes calls become structured `tool_calls` with the text outside the
    markup, stripped, as content (templates put their own separators around calls).
    """
    bracket = bool(action.tool_calls) and all(c.id.startswith("bracket") for c in action.tool_calls)
    if bracket or not (action.tool_calls or action.parse_errors):
        # Verbatim, whitespace included, so re-rendering gives back the text the model wrote.
        return {"role": "assistant", "content": action.raw or action.text}
    return action.as_message()
