"""The user seat's reward: the share of the user's turns that broke no rule.

A user turn is one (agent message, user reply) pair; its findings are `mua.users.rules`' plus the
gym's own check (`UserSeat.check`, rule `inconsistent`). fidelity = C / N over the N user turns,
C of them without a finding (1.0 when N = 0), paid once when the episode ends (component
`fidelity`; docs/user_seat.md). Deterministic.
Not here: the LLM judge (`seat_judge`), blending (`seat_env`), running an episode.
"""

from __future__ import annotations

from dataclasses import dataclass

from mua.users.rules import user_findings

RULES = ("leak", "gave_up", "contradicted", "invented", "inconsistent")


@dataclass
class UserTurn:
    agent: str  # the agent's message, as the policy saw it
    reply: str  # the policy's reply (the user's)


def turn_findings(turns: list[UserTurn], task, gym: str, seat, success: bool) -> list[set[str]]:
    """The rules each user turn broke (a set per turn, in order)."""
    messages: list[dict] = []
    for turn in turns:
        messages += [
            {"role": "assistant", "content": turn.agent},
            {"role": "user", "content": turn.reply},
        ]
    found: list[set[str]] = [set() for _ in turns]
    row = {"messages": messages, "success": success, "gym": gym}
    for finding in user_findings(row, task.payload, gym):
        found[finding.turn // 2].add(finding.rule)
    agents, replies = [t.agent for t in turns], [t.reply for t in turns]
    for i in range(len(turns)):
        if seat.finding(agents[: i + 1], replies[: i + 1], task) is not None:
            found[i].add("inconsistent")
    return found


def fidelity(turns: list[UserTurn], task, gym: str, seat, success: bool) -> tuple[float, dict]:
    """(fidelity, {rule: number of turns that broke it}) of one episode's user turns."""
    found = turn_findings(turns, task, gym, seat, success)
    if not found:
        return 1.0, {}
    clean = sum(1 for rules in found if not rules)
    counts = {rule: sum(1 for rules in found if rule in rules) for rule in RULES}
    return clean / len(found), {k: v for k, v in counts.items() if v}
