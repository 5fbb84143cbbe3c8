"""Which rule set a UserRL-derived gym plays by: `gym.options.rules: upstream | mua`.

`upstream` (the default) reproduces UserRL's published training setup: a turn without a tool
call ends the episode, and every `interact_with_env` observation ends with `"\nReward: <r>"`,
the reward that call earned, as UserRL's interact tool returns it. `mua` keeps the variants this
project added (plain text counts as an `action`, no reward in the observation, and each gym's
own differences documented in docs/fidelity.md). Nothing else is decided here: each gym reads
the rule set and applies its own rules.
"""

from __future__ import annotations

from mua.errors import UsageError
from mua.gym import AgentAction, StepResult

RULE_SETS = ("upstream", "mua")
DEFAULT_RULES = "upstream"
NO_TOOL_CALL_MESSAGE = "The episode ended: the turn made no tool call."


def rule_set(options: dict | None, gym: str) -> str:
    """The rule set named by `options["rules"]` (default `upstream`); a bad name is a UsageError."""
    value = (options or {}).get("rules", DEFAULT_RULES)
    if value not in RULE_SETS:
        raise UsageError(
            f"gym {gym!r}: gym.options.rules must be 'upstream' or 'mua', got {value!r}"
        )
    return value


def with_reward(observation: str, reward: float) -> str:
    """The observation followed by the reward line UserRL's interact tool appends."""
    return f"{observation}\nReward: {float(reward)}"


def no_tool_call_ending(action: AgentAction) -> StepResult:
    """The upstream rule's last step: a turn without a tool call ends the episode unrewarded,
    counted as `no_tool_call` (plus `parse_error` for each malformed call in the text)."""
    errors = {"no_tool_call": 1}
    if action.parse_errors:
        errors["parse_error"] = len(action.parse_errors)
    return StepResult(
        messages=[{"role": "user", "content": NO_TOOL_CALL_MESSAGE}],
        done=True,
        info={"errors": errors},
    )
