"""Read one assistant turn's tool calls in any format mua knows, and store it back as a message.

`parse_action(text, parser)` returns a `mua.gym.AgentAction` and never raises: markup that cannot
be read lands in `AgentAction.parse_errors` with a sentence the model can act on (a reader that
fails in any other way gives one parse error naming the failure). A call is read only when
complete; a turn cut by the token budget runs no calls (`cut_by_budget`). Reasoning inside
`<think>...</think>` is never read for calls. `read_native_calls` reads structured (OpenAI wire)
calls. Each family's markup lives in its own module of `mua.families`.
Not here: checking tool names or argument types (the gym's `ToolEnv`), rendering (the model's
chat template).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from mua.config.model import ParserName
from mua.families.bracket import parse_bracket
from mua.families.hermes import parse_hermes
from mua.families.json_calls import call_from_object, strip_think
from mua.families.registry import ALIASES, auto_family, get_family
from mua.gym.api import AgentAction
from mua.llm.tool_reply import register_readers
from mua.text import clean_text

PARSER_NAMES: tuple[str, ...] = ParserName.__args__
_THINK_OPEN = "<think>"
CUT_TURN_ERROR = (
    "your turn hit the token limit before it ended, so none of its tool calls were run; "
    "write shorter turns"
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
            call, err = call_from_object(obj, i)
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
    visible = strip_think(text)
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
