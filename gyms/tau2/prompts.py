"""The tau2 agent's opening: its system prompt (talking to a user, or solo on a ticket) and the
greeting it opens with.

Not here: tau2-bench's own prompt text for the leaderboard path (`gyms.tau2.leaderboard.source`).
"""

from __future__ import annotations

GREETING = "Hi! How can I help you today?"
AGENT_INSTRUCTION = """You are a customer service agent. Help the user as the <policy> below says.
In each turn do one of two things: send one message to the user, or make one tool call; never both.
Be helpful, follow the policy exactly, and make every tool call valid JSON."""
SOLO_INSTRUCTION = """You are a customer service agent solving the <ticket> below as the <policy> says.
You cannot talk to the user: only make tool calls, one per turn, each valid JSON.
When the ticket is solved, call the `done` tool, alone."""


def system_prompt(policy: str, solo: bool, ticket: str | None) -> str:
    if solo:
        return (
            f"<instructions>\n{SOLO_INSTRUCTION}\n</instructions>\n<policy>\n{policy}\n"
            f"</policy>\n<ticket>\n{ticket}\n</ticket>"
        )
    return f"<instructions>\n{AGENT_INSTRUCTION}\n</instructions>\n<policy>\n{policy}\n</policy>"
