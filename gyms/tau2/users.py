"""The simulated customers of the tau2 gym: an LLM user and an offline scripted user.

Both answer one agent message at a time with `reply(agent_text) -> UserTurn`: the text the
agent sees, and the tool calls the user made on its own device on the way (telecom), which
the env has already run through `Tau2Environment.tool_call("user", ...)` (synced after each).
The agent never sees the user's tool results; the user never sees the agent's.

LLM user: its system prompt is tau2's user-simulator guidelines read from the data folder
(`tau2/user_simulator/simulation_guidelines[_tools].md`, persona text spliced in where the
file says `<PERSONA_GUIDELINES>`) followed by the task's scenario in `<scenario>` tags, as tau2
builds it. It talks through mua's OpenAI-compatible client (`JudgeClient.complete`: retries,
cache, `UserFailure` masking). tau2 lets the user model call tools natively; mua's client
returns text, so the user writes a tool call as one JSON object
`{"tool_call": {"name": ..., "arguments": {...}}}` (the format is explained after the
guidelines); a bad call becomes an error message back to the user, as in tau2. A user that
makes more than `MAX_USER_TOOL_CALLS` calls in one reply breaks protocol: `UserFailure`.

Scripted user: no model. It opens with the reason for the call and what it knows, answers
questions from the scenario, confirms proposals, performs the task's gold user actions (in
order) when the agent names them, and ends with `###STOP###` when the agent says the work is
done, or `###TRANSFER###` after a transfer. Good enough for CPU tests and quickstarts, not a
measure of anything.

Non-cooperative persona (`persona: non_cooperative`): extra guidelines (LLM user) or a
first refusal of each request for information (scripted user); studies of real users find
LLM users more cooperative than people.
"""

from __future__ import annotations

import json
import re
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

from gyms.tau2.domain import USER, Tau2Environment
from mua.gym.api import UserFailure

STOP, TRANSFER, OUT_OF_SCOPE = "###STOP###", "###TRANSFER###", "###OUT-OF-SCOPE###"
STOP_TOKENS = (STOP, TRANSFER, OUT_OF_SCOPE)
MAX_USER_TOOL_CALLS = 10

NON_COOPERATIVE = """## Persona: reluctant customer
You are short on patience and do not make the agent's job easy.
- Do not volunteer information: give a detail only when the agent asks for it directly,
  and the first time you are asked for something, ask why it is needed before giving it.
- Question suggestions before following them, and say so when a step did not help.
- Do not accept an outcome your instructions do not allow; keep pressing instead."""

TOOL_FORMAT = """## How to use your tools
Your tools:
{tools}

To use a tool, reply with exactly one JSON object and nothing else:
{{"tool_call": {{"name": "<tool name>", "arguments": {{...}}}}}}
You will then see the result and reply again. Any other reply is sent to the agent as your
message."""


def is_stop(text: str | None) -> bool:
    return bool(text) and any(token in text for token in STOP_TOKENS)


def scenario_text(scenario: dict) -> str:
    """The task's user scenario written the way tau2 shows it to its user model."""
    lines = []
    if scenario.get("persona") is not None:
        lines += ["Persona:", textwrap.indent(scenario["persona"], "\t")]
    instructions = scenario.get("instructions")
    if isinstance(instructions, dict):
        tab = "\t"
        parts = [f"Domain: {instructions.get('domain')}"]
        parts.append(f"Reason for call:\n{textwrap.indent(instructions['reason_for_call'], tab)}")
        if instructions.get("known_info") is not None:
            parts.append(f"Known info:\n{textwrap.indent(instructions['known_info'], tab)}")
        if instructions.get("unknown_info") is not None:
            parts.append(f"Unknown info:\n{textwrap.indent(instructions['unknown_info'], tab)}")
        parts.append(
            f"Task instructions:\n{textwrap.indent(instructions['task_instructions'], tab)}"
        )
        instructions = "\n".join(parts)
    lines += ["Instructions:", textwrap.indent(str(instructions), "\t")]
    return "\n".join(lines)


def guidelines_path(data_dir: Path, with_tools: bool) -> Path:
    from gyms.tau2.domain import domains_dir

    name = "simulation_guidelines_tools.md" if with_tools else "simulation_guidelines.md"
    return domains_dir(data_dir).parent / "user_simulator" / name


def user_system_prompt(data_dir: Path, scenario: dict, tools: list[dict], persona: str) -> str:
    guidelines = guidelines_path(data_dir, bool(tools)).read_text(encoding="utf-8")
    extra = f"\n\n{NON_COOPERATIVE}\n" if persona == "non_cooperative" else ""
    guidelines = guidelines.replace("<PERSONA_GUIDELINES>", extra)
    prompt = f"{guidelines}\n\n<scenario>\n{scenario_text(scenario)}\n</scenario>".strip()
    if tools:
        listed = "\n".join(
            f"- {t['function']['name']}: {t['function']['description']} "
            f"parameters: {json.dumps(t['function']['parameters'].get('properties', {}))}"
            for t in tools
        )
        prompt += "\n\n" + TOOL_FORMAT.format(tools=listed)
    return prompt


@dataclass
class UserTurn:
    text: str
    calls: list[dict] = field(default_factory=list)


def parse_tool_call(text: str) -> dict | None:
    """The `{"tool_call": {...}}` object of a user reply, or None for a plain message."""
    stripped = text.strip()
    if stripped.startswith("```"):
        stripped = re.sub(r"^```\w*\s*|\s*```$", "", stripped)
    if not stripped.startswith("{") or '"tool_call"' not in stripped:
        return None
    try:
        value = json.loads(stripped)
    except json.JSONDecodeError:
        return None
    call = value.get("tool_call") if isinstance(value, dict) else None
    if not isinstance(call, dict) or not isinstance(call.get("name"), str):
        return None
    return call


class LLMUser:
    """tau2's LLM user over `JudgeClient.complete` (see the module docstring)."""

    def __init__(self, llm, env: Tau2Environment, data_dir: Path, scenario: dict, persona: str):
        self.llm = llm
        self.env = env
        tools = env.user_schemas()
        self.messages = [
            {"role": "system", "content": user_system_prompt(data_dir, scenario, tools, persona)}
        ]

    async def reply(self, agent_text: str) -> UserTurn:
        """The user's message to the agent after its tool calls (at most MAX_USER_TOOL_CALLS);
        a user that keeps calling tools past that breaks protocol: `UserFailure` (masked, the
        user's failure), never an ending the agent would be scored on."""
        self.messages.append({"role": "user", "content": agent_text})
        calls = []
        while True:
            text = await self.llm.complete(self.messages)
            self.messages.append({"role": "assistant", "content": text})
            call = parse_tool_call(text)
            if call is None:
                return UserTurn(text, calls)
            if len(calls) >= MAX_USER_TOOL_CALLS:
                raise UserFailure(
                    f"{_where(self.llm)} made {MAX_USER_TOOL_CALLS} tool calls and asked for "
                    "another without a message for the agent; the user model breaks the "
                    "protocol (use a stronger user model)"
                )
            arguments = call.get("arguments")
            arguments = arguments if isinstance(arguments, dict) else {}
            content, error = self.env.tool_call(USER, call["name"], arguments)
            calls.append({"requestor": USER, "name": call["name"], "arguments": arguments})
            note = "Tool error" if error else "Tool result"
            self.messages.append(
                {"role": "user", "content": f"[{note} from {call['name']}]\n{content}"}
            )


def _where(llm) -> str:
    """How errors name the LLM user: its endpoint's description when it has one."""
    endpoint = getattr(llm, "endpoint", None)
    return getattr(endpoint, "where", None) or "the tau2 LLM user"


_ASKS_CONFIRM = re.compile(r"\b(confirm|proceed|shall i|should i|would you like|do you want)\b")
_DONE = re.compile(
    r"\b(completed|has been|have been|successfully|all set|is done|are done|transferred)\b"
)


def announces_done(agent_text: str) -> bool:
    """Whether an agent message says the work is done (the scripted user then ends)."""
    return bool(_DONE.search((agent_text or "").lower()))


class ScriptedUser:
    """Plays a task without a model (see the module docstring)."""

    def __init__(self, env: Tau2Environment, task: dict, persona: str = "cooperative"):
        self.env = env
        scenario = task.get("user_scenario") or {}
        instr = scenario.get("instructions")
        instr = instr if isinstance(instr, dict) else {"reason_for_call": str(instr or "")}
        self.reason = " ".join(str(instr.get("reason_for_call") or "").split())
        self.known = " ".join(str(instr.get("known_info") or "").split())
        actions = (task.get("evaluation_criteria") or {}).get("actions") or []
        self.pending = [a for a in actions if a.get("requestor") == USER]
        self.persona = persona
        self.pushed_back = False
        self.told_known = False

    def opening(self) -> str:
        text = f"Hi. {self.reason}"
        if self.known and self.persona != "non_cooperative":
            self.told_known = True
            text += f" {self.known}"
        return text

    async def reply(self, agent_text: str) -> UserTurn:
        low = (agent_text or "").lower()
        calls, results = [], []
        while self.pending and self.pending[0]["name"].lower() in low:
            action = self.pending.pop(0)
            arguments = dict(action.get("arguments") or {})
            content, error = self.env.tool_call(USER, action["name"], arguments)
            calls.append({"requestor": USER, "name": action["name"], "arguments": arguments})
            results.append(f"I did {action['name']}: {content}")
        if calls:
            return UserTurn(" ".join(results), calls)
        return UserTurn(self.say(low))

    def say(self, agent_text: str) -> str:
        """The text reply to an agent message that names no pending user action."""
        low = (agent_text or "").lower()
        if not low.strip():
            return "Sorry, I did not get that."
        if "transfer" in low and _DONE.search(low):
            return TRANSFER
        if _DONE.search(low) and "?" not in low:
            return STOP
        if "?" in low:
            if self.persona == "non_cooperative" and not self.pushed_back:
                self.pushed_back = True
                return "Why do you need that? I already told you what I want."
            if _ASKS_CONFIRM.search(low):
                return "Yes, please go ahead."
            if self.known:
                self.told_known = True
                return self.known
            return "I don't know that, sorry."
        if _DONE.search(low):
            return STOP
        return "Okay. Please continue."
