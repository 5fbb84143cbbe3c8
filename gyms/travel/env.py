"""The travel environment: one episode of eliciting preferences, searching and recommending.

Actions arrive as `interact_with_env(choice, content)` tool calls, as bracket text (`[search]
hotel`, `[answer] H3`) when the model made no tool call, or as plain text (a message to the
traveller). Aspects are handled in the trip's order; each gets exactly one `answer`, scored
1.0 for the best option, 0.8 for another acceptable one, 0 otherwise, divided by the number of
aspects so an episode's answer reward is at most 1. Optional components, weighted by the recipe
(default weight 0): `search` (first search of each needed aspect, 1/aspects each) and
`preference` (each preference revealed because the agent asked, 1/preferences each).

The episode ends when every aspect has an answer or on `finish`. Turn limits are the runner's.
A mistake in an action is an observation plus an `errors` count in `info`, never an exception;
only a traveller failure (`UserFailure`) propagates, for the runner to mask the trajectory.
"""

from __future__ import annotations

import re
from typing import Literal

from gyms.travel.scenarios import ASPECT_NAMES, describe_option, find_aspects
from gyms.travel.users import LLMTraveller, Preferences, ScriptedTraveller
from mua.gym.api import (
    AgentAction,
    GymContext,
    ResetResult,
    StepResult,
    Task,
    ToolCall,
)
from mua.gym.tools import ToolEnv, tool

DEFAULT_WEIGHTS = {"answer": 1.0, "search": 0.0, "preference": 0.0}
PROACTIVE_AFTER_TURNS = 3
_BRACKET = re.compile(r"\[(action|search|answer|finish)\]\s*(.*)", re.I | re.S)
_THINK = re.compile(r"<think>.*?(</think>|$)", re.S)


def bracket_calls(text: str) -> list[ToolCall]:
    """`[choice] content` in plain text -> one interact_with_env call (thinking is skipped)."""
    m = _BRACKET.search(_THINK.sub("", text or ""))
    if not m:
        return []
    return [
        ToolCall(
            "interact_with_env",
            {"choice": m.group(1).lower(), "content": m.group(2).strip()},
            id="bracket_0",
        )
    ]


class TravelEnv(ToolEnv):
    def __init__(self, ctx: GymContext):
        self.ctx = ctx
        self.user = (
            LLMTraveller(ctx.llm)
            if ctx.user_kind == "llm" and ctx.llm is not None
            else ScriptedTraveller()
        )
        self.weights = {k: float(ctx.reward_weights.get(k, v)) for k, v in DEFAULT_WEIGHTS.items()}

    async def reset(self, task: Task) -> ResetResult:
        self.trip = task.payload
        self.aspects = [a["name"] for a in self.trip["aspects"]]
        self.prefs = Preferences(self.trip)
        self.current = 0
        self.answers: dict[str, str] = {}
        self.searched: set[str] = set()
        self.turns_without_question = 0
        self.done = False
        self._turn: dict[str, float] = {}
        self._asked = False
        return ResetResult(messages=[dict(m) for m in task.prompt], tools=self.tool_schemas())

    @tool
    async def interact_with_env(
        self, choice: Literal["action", "search", "answer", "finish"], content: str = ""
    ) -> str:
        """Talk to the traveller, search options, recommend an option, or finish.

        Args:
            choice: `action` (message to the traveller), `search` (options of one aspect), `answer` (one option id for the current aspect) or `finish`.
            content: The message, the aspect to search (e.g. hotel), or the option id (e.g. H3).
        """
        if self.done:
            return "The conversation is over; no further actions are taken."
        if choice == "action":
            return await self._talk(content)
        if choice == "search":
            return self._search(content)
        if choice == "answer":
            return self._answer(content)
        self.done = True
        return "Conversation finished."

    async def _talk(self, message: str) -> str:
        if not message.strip():
            raise ValueError(
                "empty message to the traveller; write what you want to ask in `content`"
            )
        reply, revealed = await self.user.respond(message, self.prefs, self.current)
        new = [p for p in revealed if p not in self.prefs.revealed]
        self.prefs.revealed.update(new)
        if new:
            self._asked = True
            self._add("preference", len(new) / max(1, self.prefs.total()))
        return reply

    def _search(self, query: str) -> str:
        wanted = find_aspects(query, self.aspects)
        if not wanted:
            other = find_aspects(query)
            needed = ", ".join(ASPECT_NAMES[a] for a in self.aspects)
            if other:
                return f"No {ASPECT_NAMES[other[0]]} options: this trip needs {needed}."
            raise ValueError(f"name one aspect to search; this trip needs {needed}")
        aspect = wanted[0]
        index = self.aspects.index(aspect)
        if aspect not in self.searched:
            self.searched.add(aspect)
            self._add("search", 1.0 / len(self.aspects))
        lines = [describe_option(o, aspect) for o in self.trip["aspects"][index]["options"]]
        return f"{ASPECT_NAMES[aspect]} options:\n" + "\n".join(lines)

    def _answer(self, content: str) -> str:
        if self.current >= len(self.aspects):
            return "Every aspect already has a recommendation."
        spec = self.trip["aspects"][self.current]
        ids = {o["id"].upper(): o["id"] for o in spec["options"]}
        found = re.findall(r"\b([A-Z]\d{1,3})\b", content.upper())
        picked = [ids[f] for f in found if f in ids]
        name = ASPECT_NAMES[spec["name"]]
        if not picked:
            raise ValueError(
                f"give one option id of the current aspect ({name}, ids like {spec['options'][0]['id']})"
            )
        if len(set(picked)) > 1:
            raise ValueError(f"recommend exactly one {name} option, got {sorted(set(picked))}")
        choice = picked[0]
        score = 1.0 if choice == spec["best"] else 0.8 if choice in spec["acceptable"] else 0.0
        self.answers[spec["name"]] = choice
        self._add("answer", score / len(self.aspects))
        self.current += 1
        if self.current >= len(self.aspects):
            self.done = True
            return f"Recorded {choice} for the {name}. That's everything I needed, thank you!"
        return f"Recorded {choice} for the {name}. Next, the {ASPECT_NAMES[self.aspects[self.current]]}."

    def _add(self, component: str, raw: float) -> None:
        self._turn[component] = self._turn.get(component, 0.0) + raw * self.weights[component]

    async def step(self, action: AgentAction) -> StepResult:
        self._turn, self._asked = {}, False
        if self.done:
            return StepResult(
                messages=[{"role": "user", "content": "The conversation is over."}], done=True
            )
        calls = list(action.tool_calls)
        from_text = not calls and not action.parse_errors
        if from_text:
            calls = bracket_calls(action.text)
        from_text = from_text or (bool(calls) and all(c.id.startswith("bracket") for c in calls))
        errors: dict[str, int] = {}
        if calls or action.parse_errors:
            act = AgentAction(
                text=action.text, tool_calls=calls, parse_errors=list(action.parse_errors)
            )
            messages, errors = await self.call_tools(act)
            if from_text:  # the model wrote bracket text, so it reads the answer as a user turn
                messages = [{"role": "user", "content": m["content"]} for m in messages]
        elif _THINK.sub("", action.text).strip():
            reply = await self._talk(_THINK.sub("", action.text).strip())
            messages = [{"role": "user", "content": reply}]
        else:
            messages = [
                {"role": "user", "content": "(The traveller waits for you to say or do something.)"}
            ]
            errors = {"empty_turn": 1}
        messages += self._proactive()
        info = {"errors": errors} if errors else {}
        info.update(answered=len(self.answers), revealed=len(self.prefs.revealed))
        return StepResult(
            messages=messages,
            reward=float(sum(self._turn.values())),
            components=dict(self._turn),
            done=self.done,
            info=info,
        )

    def _proactive(self) -> list[dict]:
        if self.done:
            return []
        self.turns_without_question = 0 if self._asked else self.turns_without_question + 1
        if self.turns_without_question < PROACTIVE_AFTER_TURNS:
            return []
        self.turns_without_question = 0
        for index in [self.current] + list(range(len(self.aspects))):
            hidden = self.prefs.hidden(index) if index < len(self.aspects) else []
            if hidden:
                self.prefs.revealed.add(hidden[0])
                text = self.prefs.text(hidden[0])
                text = text if text.startswith(("I ", "I'")) else text[0].lower() + text[1:]
                return [{"role": "user", "content": f"By the way, {text}"}]
        return []

    async def close(self) -> None:
        return None


def make_env(ctx: GymContext) -> TravelEnv:
    return TravelEnv(ctx)
