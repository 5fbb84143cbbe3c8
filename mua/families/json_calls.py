"""JSON tool calls shared by every family's reader: one decoded `{"name", "arguments"}` object
made a `ToolCall` (with the argument depth limit), the JSON reader's limit errors in words, the
short quote of bad markup an error shows, and reasoning blocks kept out of call reading.

Nothing here knows a family's markup, and nothing raises on model text: every failure becomes an
error string the model can act on.
"""

from __future__ import annotations

import json
import re

from mua.gym.api import ToolCall
from mua.text import clean_value

MAX_ARGUMENT_DEPTH = 32  # containers inside tool arguments; real tools need a handful
MAX_ERROR_SNIPPET = 60
THINK = re.compile(r"<think>.*?(</think>|$)", re.S)


def snippet(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= MAX_ERROR_SNIPPET else text[: MAX_ERROR_SNIPPET - 3] + "..."


def unclosed_error(open_tag: str, close_tag: str) -> str:
    """The parse error of a call (or call section) whose close never came: it is not read."""
    return f"{open_tag} is not closed with {close_tag}; a call runs only when complete"


def strip_think(text: str) -> str:
    return THINK.sub(" ", text)


def outside_think(text: str, edit) -> str:
    """Apply `edit` to the parts of `text` outside think blocks, keeping think blocks verbatim."""
    out, pos = [], 0
    for m in THINK.finditer(text):
        out.append(edit(text[pos : m.start()]))
        out.append(m.group(0))
        pos = m.end()
    out.append(edit(text[pos:]))
    return "".join(out)


def masked_think(text: str) -> str:
    """`text` with think blocks blanked out, same length, so positions still match `text`."""
    return THINK.sub(lambda m: " " * len(m.group(0)), text)


def json_limit(err: BaseException) -> str:
    """What a JSON reader's limit error means, in words the model can act on."""
    if isinstance(err, RecursionError):
        return "nested too deeply"
    if "digits" in str(err):
        return "a number with too many digits"
    return snippet(str(err))


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


def call_from_object(obj: object, index: int) -> tuple[ToolCall | None, str | None]:
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
            return None, f"arguments of {name!r} are a string that is not JSON: {snippet(args)}"
        except (ValueError, RecursionError) as e:
            return None, f"arguments of {name!r} are not usable JSON ({json_limit(e)})"
    if args is None:
        args = {}
    if not isinstance(args, dict):
        return None, f"arguments of {name!r} must be a JSON object, got {type(args).__name__}"
    if deeper_than(args, MAX_ARGUMENT_DEPTH):
        return None, f"arguments of {name!r} are {too_deep}"
    return ToolCall(name=name.strip(), arguments=clean_value(args), id=f"call_{index}"), None
