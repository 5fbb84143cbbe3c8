"""UserRL-style bracket actions (`[action] ...`, `[search] ...`, `[answer] ...`, `[finish]`),
read as calls of the one tool such gyms expose, `interact_with_env(choice, content)`.

Not here: choosing the format (`mua.families.tool_calls.parse_action`).
"""

from __future__ import annotations

import re

from mua.families.json_calls import strip_think
from mua.gym.api import AgentAction, ToolCall

BRACKET_TOOL = "interact_with_env"
_BRACKET = re.compile(r"\[\s*(action|search|answer|finish)\s*\]", re.I)


def parse_bracket(text: str) -> AgentAction:
    """The first bracket action; its content runs to the next bracket tag or the end of the text."""
    visible = strip_think(text)
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
