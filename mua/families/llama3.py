"""Llama 3.x tool calls as a family: `mua.rollout.toolcalls.parse_llama3_json`, strict about
other families' markup.

Llama writes bare JSON (`{"name": ..., "parameters": {...}}`). JSON wrapped in Hermes
`<tool_call>` tags is another family's format: it is reported as a parse error, not read.
"""

from __future__ import annotations

from mua.families.common import split_think
from mua.gym.api import AgentAction
from mua.rollout.toolcalls import parse_llama3_json


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
