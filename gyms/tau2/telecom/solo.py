"""Telecom solo mode: no customer; the agent gets the ticket and works the phone itself.

As in tau2-bench, a solo episode gives the agent the task's `ticket`, the solo policy, its own
tools plus the phone's tools and a `done` tool. Every agent message must be tool calls only;
calling `done` ends the episode (the stop token `###STOP###`), text is refused with a format
error. `SoloEpisode` runs those rules over a solo `TelecomEnvironment`; the end state is then
scored like any other episode (env assertions on both databases). Model calls and scoring
are not here.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gyms.tau2.domain import AGENT, Tau2Domain
from gyms.tau2.telecom.environment import TelecomEnvironment

STOP = "###STOP###"
DONE_TOOL = "done"
DONE_SCHEMA = {
    "type": "function",
    "function": {
        "name": DONE_TOOL,
        "description": "Call this, alone in its message, once the ticket is solved.",
        "parameters": {"properties": {}, "title": "parameters", "type": "object"},
    },
}
NO_TEXT = (
    "You sent a message with text content. Each message must contain tool calls and no other "
    "text content."
)
EMPTY = "You sent an empty message. Each message must contain tool calls and no other text content."

INSTRUCTIONS = """You are a customer service agent working a support ticket on your own,
following the <policy> below. You cannot talk to the customer: you act only through tool
calls, including the tools of the customer's phone. Plan, then call the tools that solve the
ticket. When it is solved, send one message holding a single call to `{done}` and nothing else.
Always follow the policy and write valid JSON arguments."""


def solo_system_prompt(policy: str, ticket: str) -> str:
    """The solo agent's system prompt: instructions, the solo policy and the ticket."""
    return (
        f"<instructions>\n{INSTRUCTIONS.format(done=DONE_TOOL)}\n</instructions>\n"
        f"<policy>\n{policy}\n</policy>\n<ticket>\n{ticket}\n</ticket>"
    )


def can_run_solo(task: dict) -> bool:
    """tau2's rule: a ticket and at least one gold action."""
    criteria = task.get("evaluation_criteria") or {}
    return bool(task.get("ticket")) and bool(criteria.get("actions"))


@dataclass
class SoloStep:
    results: list[tuple[str, bool]] = field(default_factory=list)
    feedback: str | None = None
    done: bool = False


class SoloEpisode:
    """One solo episode over a fresh solo environment with the task's initial state."""

    def __init__(self, domain: Tau2Domain, task: dict):
        if not can_run_solo(task):
            raise ValueError(f"task {task.get('id')!r} has no ticket or no gold actions")
        self.task = task
        self.env: TelecomEnvironment = domain.new_environment(solo=True)
        self.env.apply_initial_state(task.get("initial_state"))
        self.calls: list[dict] = []
        self.done = False

    @property
    def system_prompt(self) -> str:
        return solo_system_prompt(self.env.policy, self.task["ticket"])

    def tools(self) -> list[dict]:
        return self.env.agent_schemas() + [DONE_SCHEMA]

    def step(self, text: str | None, tool_calls: list[dict]) -> SoloStep:
        """Apply one agent message: `tool_calls` as [{"name", "arguments"}], `text` its text."""
        if text and text.strip():
            return SoloStep(feedback=NO_TEXT)
        if not tool_calls:
            return SoloStep(feedback=EMPTY)
        if any(c["name"] == DONE_TOOL for c in tool_calls):
            self.done = True
            return SoloStep(done=True)
        step = SoloStep()
        for call in tool_calls:
            arguments = call.get("arguments")
            arguments = arguments if isinstance(arguments, dict) else {}
            step.results.append(self.env.tool_call(AGENT, call["name"], arguments))
            self.calls.append({"requestor": AGENT, "name": call["name"], "arguments": arguments})
        return step
