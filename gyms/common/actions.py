"""Conversions between assistant messages, bracket text and `AgentAction`s for these gyms.

`call_message(choice, content)` builds the assistant message a scripted expert returns;
`action_from_message(msg)` turns such a message back into an `AgentAction`; `parse_bracket_text`
reads the bare `[action] ...` / `[search] ...` / `[answer] ...` / `[finish]` form. The rollout
runner has its own parser for model output; these exist so experts, tests and baselines can
drive an env without it. Unknown bracket tags are left as plain text (the env then treats the
whole text as an `action`).
"""

from __future__ import annotations

import json
import re

from mua.gym import AgentAction, ToolCall

TOOL_NAME = "interact_with_env"
_BRACKET = re.compile(r"^\s*\[(action|search|answer|finish)\]\s*(.*)$", re.S | re.I)


def call_message(choice: str, content: str = "", thought: str = "") -> dict:
    """An assistant message calling `interact_with_env(choice, content)`."""
    return {
        "role": "assistant",
        "content": thought,
        "tool_calls": [
            {
                "type": "function",
                "function": {
                    "name": TOOL_NAME,
                    "arguments": {"choice": choice, "content": content},
                },
            }
        ],
    }


def action_from_message(message: dict) -> AgentAction:
    """The `AgentAction` an assistant message stands for (arguments may be a JSON string)."""
    calls, errors = [], []
    for raw in message.get("tool_calls") or []:
        fn = raw.get("function", raw) if isinstance(raw, dict) else {}
        args = fn.get("arguments", {}) if isinstance(fn, dict) else {}
        if isinstance(args, str):
            try:
                args = json.loads(args)
            except json.JSONDecodeError:
                errors.append(f"arguments of {fn.get('name')!r} are not valid JSON")
                continue
        calls.append(ToolCall(name=str(fn.get("name", "")), arguments=args))
    text = message.get("content") or ""
    if not calls and not errors:
        return parse_bracket_text(text)
    return AgentAction(text=text, tool_calls=calls, parse_errors=errors, raw=text)


def call_action(choice: str, content: str = "", raw: str = "") -> AgentAction:
    """The `AgentAction` of one `interact_with_env(choice, content)` call."""
    call = ToolCall(name=TOOL_NAME, arguments={"choice": choice, "content": content})
    return AgentAction(text="", tool_calls=[call], raw=raw)


def parse_bracket_text(text: str) -> AgentAction:
    """`[choice] content` -> a tool call; anything else stays plain text."""
    match = _BRACKET.match(text or "")
    if not match:
        return AgentAction(text=text or "", raw=text or "")
    return call_action(match.group(1).lower(), match.group(2).strip(), raw=text)
