"""Read tool calls out of a policy's text: Hermes/Qwen `<tool_call>{json}</tool_call>` blocks,
Llama-3.x bare JSON calls (`{"name": ..., "parameters": {...}}`, optionally after
`<|python_tag|>`, several separated by `;` or newlines) and UserRL-style bracket actions
(`[action] ...`, `[search] ...`, `[answer] ...`, `[finish]`).

`parse_action(text, parser)` returns a `mua.gym.AgentAction` and never raises: markup that cannot
be read lands in `AgentAction.parse_errors` with a sentence the model can act on. That includes
JSON the standard library refuses past its limits (nesting deep enough to exhaust the recursion
limit, integers of more than 4,300 digits) and arguments nested deeper than `MAX_ARGUMENT_DEPTH`
(templates and tools walk arguments recursively); a reader that fails in any other way gives one
parse error naming the failure instead of raising. A call is read only when complete (closed,
its arguments whole); a turn cut by the token budget runs no calls (`cut_by_budget`). Bracket actions
become calls of the one tool UserRL-style gyms expose, `interact_with_env(choice, content)`.
This module does not check tool names or argument types; the gym's `ToolEnv` does that.
Reasoning inside `<think>...</think>` is never parsed for actions. Without a chat template `auto`
never picks the Llama-3 reader (a plain JSON answer would read as a call); a Llama template, or
`llama3_json`, selects it. Llama's built-in
tool syntax (`<|python_tag|>brave_search.call(...)`) is not read: it becomes a parse error.
The other model families' formats live in `mua.families`; `parse_action` reads any of them.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace
from typing import Any

from mua.config.model import ParserName
from mua.gym.api import AgentAction, ToolCall
from mua.llm.tool_reply import register_readers
from mua.text import clean_text, clean_value

PARSER_NAMES: tuple[str, ...] = ParserName.__args__
BRACKET_TOOL = "interact_with_env"
BRACKET_CHOICES = ("action", "search", "answer", "finish")

_THINK_OPEN = "<think>"
CUT_TURN_ERROR = (
    "your turn hit the token limit before it ended, so none of its tool calls were run; "
    "write shorter turns"
)
_THINK = re.compile(r"<think>.*?(</think>|$)", re.S)
_TOOL_BLOCK = re.compile(r"<tool_call>(.*?)(</tool_call>|(?=<tool_call>)|$)", re.S)
_BRACKET = re.compile(r"\[\s*(action|search|answer|finish)\s*\]", re.I)
_MAX_ERROR_SNIPPET = 60
_PYTHON_TAG = "<|python_tag|>"
_LLAMA_END_MARKERS = ("<|eom_id|>", "<|eot_id|>")
_LLAMA_CALL_START = re.compile(
    r'<\|python_tag\|>|(?:^|(?<=;))[ \t]*(?=\{\s*"(?:name|parameters|arguments)"\s*:)', re.M
)
_LLAMA_RESUME = re.compile(r"[\n;][ \t]*\{")
MAX_ARGUMENT_DEPTH = 32  # containers inside tool arguments; real tools need a handful


def _snippet(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _MAX_ERROR_SNIPPET else text[: _MAX_ERROR_SNIPPET - 3] + "..."


def unclosed_error(open_tag: str, close_tag: str) -> str:
    """The parse error of a call (or call section) whose close never came: it is not read."""
    return f"{open_tag} is not closed with {close_tag}; a call runs only when complete"


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
    except (ValueError, RecursionError) as e:
        return None, f"tool call is not usable JSON ({_json_limit(e)}): {_snippet(body)}"
    if body[end:].strip():
        return None, f"unexpected text after the JSON object in <tool_call>: {_snippet(body[end:])}"
    return _call_from_object(obj, index)


def _json_limit(err: BaseException) -> str:
    """What a JSON reader's limit error means, in words the model can act on."""
    if isinstance(err, RecursionError):
        return "nested too deeply"
    if "digits" in str(err):
        return "a number with too many digits"
    return _snippet(str(err))


def deeper_than(value: object, limit: int) -> bool:
    """True when dicts/lists nest more than `limit` levels (a scalar is 0), without recursion."""
    stack = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth + 1 > limit:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False


def _call_from_object(obj: object, index: int) -> tuple[ToolCall | None, str | None]:
    """A decoded `{"name": ..., "arguments"|"parameters": {...}}` -> (call, None) or (None, error)."""
    if not isinstance(obj, dict):
        return (
            None,
            f"tool call must be a JSON object with name and arguments, got {type(obj).__name__}",
        )
    too_deep = f"nested more than {MAX_ARGUMENT_DEPTH} levels deep"
    if deeper_than(obj, MAX_ARGUMENT_DEPTH + 1):
        return None, f"tool call is {too_deep}"
    obj = clean_value(obj)  # JSON escapes such as "\\ud800" decode to unencodable text
    name = obj.get("name")
    if not isinstance(name, str) or not name.strip():
        return None, 'tool call has no "name" string'
    args = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(args, str):
        try:
            args = json.loads(args) if args.strip() else {}
        except json.JSONDecodeError:
            return None, f"arguments of {name!r} are a string that is not JSON: {_snippet(args)}"
        except (ValueError, RecursionError) as e:
            return None, f"arguments of {name!r} are not usable JSON ({_json_limit(e)})"
    if args is None:
        args = {}
    if not isinstance(args, dict):
        return None, f"arguments of {name!r} must be a JSON object, got {type(args).__name__}"
    if deeper_than(args, MAX_ARGUMENT_DEPTH):
        return None, f"arguments of {name!r} are {too_deep}"
    return ToolCall(name=name.strip(), arguments=clean_value(args), id=f"call_{index}"), None


def parse_hermes(text: str) -> AgentAction:
    """Every `<tool_call>...</tool_call>` block (several per turn); a block without its close is
    a parse error, not read."""
    visible = _strip_think(text)
    calls: list[ToolCall] = []
    errors: list[str] = []
    for i, match in enumerate(_TOOL_BLOCK.finditer(visible)):
        if not match.group(2):
            errors.append(unclosed_error("<tool_call>", "</tool_call>"))
            continue
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


def _masked_think(text: str) -> str:
    """`text` with think blocks blanked out, same length, so positions still match `text`."""
    return _THINK.sub(lambda m: " " * len(m.group(0)), text)


def _read_json_calls(
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
                what = f"not usable JSON ({_json_limit(e)})"
            errors.append(f"tool call is {what}: {_snippet(visible[start:])}")
            resume = _LLAMA_RESUME.search(visible, start + 1)
            pos = resume.start() + 1 if resume else len(visible)
            continue
        call, err = _call_from_object(obj, first_index + len(calls) + len(errors))
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
    visible = _masked_think(body)
    calls: list[ToolCall] = []
    errors: list[str] = []
    outside: list[str] = []
    pos = 0
    while (start := _LLAMA_CALL_START.search(visible, pos)) is not None:
        tagged = start.group(0) == _PYTHON_TAG
        # an untagged match ends where its object opens (the blanks before it may be a think block)
        outside.append(body[pos : start.start() if tagged else start.end()].rstrip(" \t"))
        found, bad, pos = _read_json_calls(visible, start.end(), len(calls) + len(errors))
        if tagged and not found and not bad:
            bad = [f"expected a JSON tool call after {_PYTHON_TAG}: {_snippet(visible[pos:])}"]
        calls += found
        errors += bad
    outside.append(body[pos:])
    return AgentAction(
        text="".join(outside).strip(), tool_calls=calls, parse_errors=errors, raw=text
    )


def _field(obj: Any, name: str) -> Any:
    return obj.get(name) if isinstance(obj, dict) else getattr(obj, name, None)


def read_native_calls(raw_calls: list[Any]) -> tuple[list[dict], list[str]]:
    """Structured tool calls -> (mua tool-call dicts with dict arguments, parse errors).

    Accepts the OpenAI wire shape (`{"id", "function": {"name", "arguments": "<json>"}}`, as
    dicts or the `openai` client's objects) and mua's own (arguments already a dict). A call
    whose arguments are not a JSON object, or that has no name, is left out and reported.
    """
    calls: list[dict] = []
    errors: list[str] = []
    for i, raw in enumerate(raw_calls):
        try:
            fn = _field(raw, "function") or raw
            obj = {"name": _field(fn, "name"), "arguments": _field(fn, "arguments")}
            call, err = _call_from_object(obj, i)
        except Exception as e:  # a reader bug must cost one call, not the run
            call, err = None, f"tool call {i + 1} could not be read ({type(e).__name__})"
        if call is None:
            errors.append(err)
            continue
        calls.append(
            {
                "id": clean_text(str(_field(raw, "id") or call.id)),
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments},
            }
        )
    return calls, errors


def parse_action(
    text: str,
    parser: str = "auto",
    tools: list[dict] | None = None,
    chat_template: str | None = None,
    reasoning_open: bool = False,
) -> AgentAction:
    """Parse one assistant turn with `parser` (a family of `mua.families`, `bracket` or `auto`).

    `auto`: the family `chat_template` identifies (bracket actions when its reader finds no
    call), or, for an unknown or absent template, Hermes blocks when present, else bracket
    actions, else text. `tools` (the turn's tool schemas) type the arguments of formats that
    write values as text. `reasoning_open`: the prompt ended in `<think>` (Qwen3.5's generation
    prompt), so the turn is reasoning up to its `</think>`, all of it when there is none.
    Never raises for any text (an unknown parser name is a programming error and does)."""
    if parser not in PARSER_NAMES:
        from mua.families import ALIASES

        if parser not in ALIASES:
            raise ValueError(
                f"unknown tool parser {parser!r}; use one of {', '.join(PARSER_NAMES)}"
            )
    text = clean_text(text)
    try:
        if reasoning_open:
            return _as_written(_parse_with(_THINK_OPEN + text, parser, tools, chat_template), text)
        return _parse_with(text, parser, tools, chat_template)
    except Exception as e:  # a reader bug must cost one turn, not the run
        error = (
            f"your reply could not be read ({type(e).__name__}); write plain text or one "
            "valid tool call"
        )
        return AgentAction(text=text.strip(), parse_errors=[error], raw=text)


def _as_written(action: AgentAction, text: str) -> AgentAction:
    """`action`, read with the prompt's `<think>` put before `text`, as the model wrote `text`."""
    action.raw = text
    action.text = action.text.removeprefix(_THINK_OPEN).strip()
    return action


def prompt_opens_reasoning(prompt_tail: str) -> bool:
    """Whether a prompt ending in `prompt_tail` leaves a `<think>` open for the model's turn."""
    return prompt_tail.rstrip().endswith(_THINK_OPEN)


def cut_by_budget(action: AgentAction) -> AgentAction:
    """A turn cut by the token budget runs no calls: its last call cannot be known complete.

    A cut turn with calls or call errors becomes one parse error and no call; a cut turn of
    plain text stays the text it is."""
    if not action.tool_calls and not action.parse_errors:
        return action
    return replace(action, tool_calls=[], parse_errors=[CUT_TURN_ERROR])


def _parse_with(
    text: str, parser: str, tools: list[dict] | None, chat_template: str | None
) -> AgentAction:
    if parser == "bracket":
        return parse_bracket(text)
    from mua.families import auto_family, get_family

    if parser != "auto":
        return get_family(parser).parse(text, tools)
    family = auto_family(chat_template) if isinstance(chat_template, str) else None
    if family is not None and family.name != "hermes":
        action = family.parse(text, tools)
        if action.tool_calls or action.parse_errors:
            return action
        bracket = parse_bracket(action.text)  # the family's visible text (harmony: the answer)
        if not bracket.tool_calls:
            return action
        bracket.raw = text
        return bracket
    visible = _strip_think(text)
    if "<tool_call>" in visible or "</tool_call>" in visible:
        return parse_hermes(text)
    return parse_bracket(text)


def action_as_message(action: AgentAction) -> dict:
    """The assistant message to store for `action`.

    Text without a valid call (plain text, or markup that failed to parse) and bracket actions
    keep the text verbatim as the content (templates have no markup for them, and a stray or
    malformed tag is part of what the model wrote); valid Hermes calls become structured
    `tool_calls` with the text outside the markup, stripped, as content (templates put their own
    separators around calls), keeping ids the model wrote itself (Mistral's, which its template
    renders back). Harmony turns (gpt-oss) keep only their parsed text: its template
    writes the channel markup itself and refuses it in content.
    """
    bracket = bool(action.tool_calls) and all(c.id.startswith("bracket") for c in action.tool_calls)
    raw = action.raw or ""
    # harmony (gpt-oss): the template refuses channel markup in content and writes it itself
    harmony = "<|channel|>" in raw and "<|message|>" in raw
    if bracket or not action.tool_calls:
        # Verbatim, whitespace included, so re-rendering gives back the text the model wrote.
        return {"role": "assistant", "content": action.text if harmony else raw or action.text}
    message = action.as_message()
    for stored, call in zip(message["tool_calls"], action.tool_calls, strict=True):
        if call.id and not call.id.startswith("call_"):  # an id the model wrote (Mistral)
            stored["id"] = call.id
    return message


# The LLM user's and judge's client (a lower layer) reads calls in their replies with these.
register_readers(parse_action, read_native_calls)
