"""DeepSeek-V3.2 tool calls (DSML): a `<｜DSML｜function_calls>` block of
`<｜DSML｜invoke name="NAME">` calls with `<｜DSML｜parameter name="KEY" string="true|false">` arguments.

The bars are U+FF5C, matched exactly; `string="true"` values are kept verbatim, `string="false"`
ones read as JSON. The format is what DeepSeek's V3.2 encoding script writes (it ships no chat
template, so none was rendered to check this). Reasoning is never read for calls.
Not here: DeepSeek-V3.1's format (`deepseek`), rendering.
"""

from __future__ import annotations

import json
import re
from functools import partial

from mua.families.common import section_calls, snippet, tagged_calls, text_call
from mua.gym.api import AgentAction, ToolCall

DSML = "｜DSML｜"
BLOCK = (f"<{DSML}function_calls>", f"</{DSML}function_calls>")
INVOKE = (f"<{DSML}invoke", f"</{DSML}invoke>")
_HEAD = re.compile(r'\s+name="([^"\n]*)"\s*>(.*)', re.S)
# groups: 1 the name, 2 the `string` flag, 3 the value
_PARAM = re.compile(
    rf'\s*<{DSML}parameter\s+name="([^"\n]*)"\s+string="(true|false)"\s*>(.*?)</{DSML}parameter>',
    re.S,
)
_USAGE = (
    f'write <{DSML}invoke name="NAME"><{DSML}parameter name="KEY" string="true">value'
    f"</{DSML}parameter></{DSML}invoke>"
)


def _value(m: re.Match, name: str) -> tuple[bool, object]:
    """(ok, value or error) of one parameter matched by `_PARAM`."""
    key, flag, raw = m.group(1).strip(), m.group(2), m.group(3)
    if flag == "true":
        return True, raw
    try:
        return True, json.loads(raw)
    except (ValueError, RecursionError):
        return False, (
            f'argument {key!r} of {name!r} is marked string="false" but is not JSON '
            f'(write string="true" for text): {snippet(raw)}'
        )


def _read_call(body: str, index: int) -> tuple[ToolCall | None, str]:
    head = _HEAD.fullmatch(body)
    if head is None or not head.group(1).strip():
        return None, f'<{DSML}invoke> without name="NAME"; {_USAGE}: {snippet(body)}'
    name = head.group(1).strip()
    return text_call(
        name,
        head.group(2),
        _PARAM,
        None,
        _USAGE,
        index,
        read=partial(_value, name=name),
        tags=(f"<{DSML}parameter",),
    )


def parse(text: str, tools: list[dict] | None = None) -> AgentAction:
    """The calls of every `function_calls` block of the turn (an unclosed one is a parse
    error, not read); values are typed by their `string` attribute, not by `tools`."""
    return tagged_calls(text, *BLOCK, lambda body, i: section_calls(body, *INVOKE, _read_call, i))
