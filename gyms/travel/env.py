"""The travel environment: one episode of eliciting preferences, searching and recommending.

Actions arrive as `interact_with_env(choice, content)` tool calls. Two rule sets, chosen by
`gym.options.rules`:

- `upstream` (default; UserRL's training setup): a turn without a tool call ends the episode;
  every 5th search fails with a backend error; a repeated search of an aspect points back to the
  earlier results; an `answer` names option ids of any aspects not yet answered (one per aspect,
  any order, several aspects at once allowed), each paying 1.0 for the best option, 0.8 for
  another acceptable one, 0 otherwise; a preference revealed because the agent asked pays 1 on
  component `preference` (default weight 0.8); the episode ends once every aspect's best option
  was picked (a wrong pick leaves it running to the turn limit, as in UserRL's async env); each
  observation ends with `"\nReward: <r>"`.
- `mua`: plain text is a message to the traveller and bracket text (`[search] hotel`) a tool
  call; aspects are answered in the trip's order, exactly one id each, scored 1.0 / 0.8 / 0
  divided by the number of aspects (an episode's answer reward is at most 1); `preference`
  pays 1/preferences per revealed preference (default weight 0); the episode ends when every
  aspect has an answer.

Both: `search` (first successful search of each aspect; 1.0 under upstream, 1/aspects under
mua; default weight 0), a preference volunteered after 3 turns without a question, `finish`
ends the episode, the LLM traveller sees the conversation so far. Turn limits are the runner's.
A mistake in an action is an observation plus an `errors` count in `info`, never an exception;
only a traveller failure (`UserFailure`) propagates, for the runner to mask the trajectory.
"""

from __future__ import annotations

import re
from typing import Literal

from gyms.common.rules import no_tool_call_ending, rule_set, with_reward
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

DEFAULT_WEIGHTS = {"answer": 1.0, "search": 0.0, "preference": 0.8}
MUA_WEIGHTS = {"answer": 1.0, "search": 0.0, "preference": 0.0}
PROACTIVE_AFTER_TURNS = 3
SEARCH_FAILURE_INTERVAL = 5
SEARCH_FAILURE = (
    "Currently the searching backend is experiencing some issues. Please try again later."
)
_BRACKET = re.compile(r"\[(action|search|answer|finish)\]\s*(.*)", re.I | re.S)
_THINK = re.compile(r"<think>.*?(</think>|$)", re.S)
_OPTION_ID = re.compile(r"\b([A-Z]\d{1,3})\b")


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
        self.rules = rule_set(ctx.options, "travel")
        self.user = (
            LLMTraveller(ctx.llm)  # in the user seat too: the policy answers (mua.users)
            if ctx.user_kind in ("llm", "seat") and ctx.llm is not None
            else ScriptedTraveller()
        )
        defaults = DEFAULT_WEIGHTS if self.rules == "upstream" else MUA_WEIGHTS
        self.weights = {k: float(ctx.reward_weights.get(k, v)) for k, v in defaults.items()}

    async def reset(self, task: Task) -> ResetResult:
        self.trip = task.payload
        self.aspects = [a["name"] for a in self.trip["aspects"]]
        self.prefs = Preferences(self.trip)
        self.current = 0
        self.answers: dict[str, str] = {}
        self.best_picked: set[str] = set()
        self.searched: set[str] = set()
        self.searches = 0
        self.history: list[tuple[str, str]] = []
        self.turns_without_question = 0
        self.done = False
        self._turn: dict[str, float] = {}
        self._errors: dict[str, int] = {}
        self._asked = False
        return ResetResult(messages=[dict(m) for m in task.prompt], tools=self.tool_schemas())

    @tool
    async def interact_with_env(
        self, choice: Literal["action", "search", "answer", "finish"], content: str = ""
    ) -> str:
        """Talk to the traveller, search options, recommend options, or finish.

        Args:
            choice: `action` (message to the traveller), `search` (options of one aspect), `answer` (option ids to recommend) or `finish`.
            content: The message, the aspect to search (e.g. hotel), or the option id(s) (e.g. H3).
        """
        if self.rules != "upstream":
            return await self._interact(choice, content)
        before = sum(self._turn.values())
        try:
            observation = await self._interact(choice, content)
        except ValueError as e:  # a rejected action: still an observation with its reward line
            observation = f"Error: {e}"
            self._errors["rejected_action"] = self._errors.get("rejected_action", 0) + 1
        return with_reward(observation, sum(self._turn.values()) - before)

    async def _interact(self, choice: str, content: str) -> str:
        if self.done:
            return "The conversation is over; no further actions are taken."
        if choice == "action":
            return await self._talk(content)
        if choice == "search":
            return self._search(content)
        if choice == "answer":
            return self._answer(content) if self.rules == "mua" else self._answer_any(content)
        self.done = True
        return "Conversation finished."

    def _first_open(self) -> int:
        """Index of the first aspect without an answer (len(aspects) when all have one)."""
        return next(
            (i for i, a in enumerate(self.aspects) if a not in self.answers), len(self.aspects)
        )

    async def _talk(self, message: str) -> str:
        if not message.strip():
            raise ValueError(
                "empty message to the traveller; write what you want to ask in `content`"
            )
        reply, revealed = await self.user.respond(
            message, self.prefs, self.current, list(self.history)
        )
        self.history.append((message, reply))
        new = [p for p in revealed if p not in self.prefs.revealed]
        self.prefs.revealed.update(new)
        if new:
            self._asked = True
            per = 1.0 if self.rules == "upstream" else 1.0 / max(1, self.prefs.total())
            self._add("preference", len(new) * per)
        return reply

    def _search(self, query: str) -> str:
        self.searches += 1
        if self.rules == "upstream" and self.searches % SEARCH_FAILURE_INTERVAL == 0:
            return SEARCH_FAILURE
        wanted = find_aspects(query, self.aspects)
        if not wanted:
            other = find_aspects(query)
            needed = ", ".join(ASPECT_NAMES[a] for a in self.aspects)
            if other:
                return f"No {ASPECT_NAMES[other[0]]} options: this trip needs {needed}."
            raise ValueError(f"name one aspect to search; this trip needs {needed}")
        aspect = wanted[0]
        index = self.aspects.index(aspect)
        if aspect in self.searched and self.rules == "upstream":
            return (
                f"You already have the search results for the {ASPECT_NAMES[aspect]}; "
                "refer to them above."
            )
        if aspect not in self.searched:
            self.searched.add(aspect)
            self._add("search", 1.0 if self.rules == "upstream" else 1.0 / len(self.aspects))
        lines = [describe_option(o, aspect) for o in self.trip["aspects"][index]["options"]]
        return f"{ASPECT_NAMES[aspect]} options:\n" + "\n".join(lines)

    @staticmethod
    def _score(spec: dict, choice: str) -> float:
        return 1.0 if choice == spec["best"] else 0.8 if choice in spec["acceptable"] else 0.0

    def _answer(self, content: str) -> str:
        """`mua` rules: one id for the current aspect, score divided by the number of aspects."""
        if self.current >= len(self.aspects):
            return "Every aspect already has a recommendation."
        spec = self.trip["aspects"][self.current]
        ids = {o["id"].upper(): o["id"] for o in spec["options"]}
        picked = [ids[f] for f in _OPTION_ID.findall(content.upper()) if f in ids]
        name = ASPECT_NAMES[spec["name"]]
        if not picked:
            raise ValueError(
                f"give one option id of the current aspect ({name}, ids like {spec['options'][0]['id']})"
            )
        if len(set(picked)) > 1:
            raise ValueError(f"recommend exactly one {name} option, got {sorted(set(picked))}")
        choice = picked[0]
        self.answers[spec["name"]] = choice
        self._add("answer", self._score(spec, choice) / len(self.aspects))
        self.current += 1
        if self.current >= len(self.aspects):
            self.done = True
            return f"Recorded {choice} for the {name}. That's everything I needed, thank you!"
        return f"Recorded {choice} for the {name}. Next, the {ASPECT_NAMES[self.aspects[self.current]]}."

    def _answer_any(self, content: str) -> str:
        """`upstream` rules: ids of any open aspects, the full score per aspect."""
        owner = {
            o["id"].upper(): (i, o["id"])
            for i, a in enumerate(self.trip["aspects"])
            for o in a["options"]
        }
        found = list(dict.fromkeys(_OPTION_ID.findall(content.upper())))
        unknown = [f for f in found if f not in owner]
        if not found or unknown:
            bad = f" ({', '.join(unknown)} is not an option of this trip)" if unknown else ""
            raise ValueError(f"give option ids from the search results, e.g. H3 or F1, H3{bad}")
        picks = [owner[f] for f in found]
        indices = [i for i, _ in picks]
        if len(set(indices)) < len(indices):
            raise ValueError("recommend at most one option per travel aspect in one answer")
        repeated = [self.aspects[i] for i in indices if self.aspects[i] in self.answers]
        if repeated:
            return (
                f"You have already recommended an option for the {ASPECT_NAMES[repeated[0]]}; only "
                "one recommendation per travel aspect is allowed. Focus on the other aspects."
            )
        lines = []
        for index, choice in picks:
            spec = self.trip["aspects"][index]
            score = self._score(spec, choice)
            self.answers[spec["name"]] = choice
            self.prefs.drop_aspect(index)
            if score == 1.0:
                self.best_picked.add(spec["name"])
            verdict = (
                "the best option"
                if score == 1.0
                else "acceptable, but not the best"
                if score
                else "not a good match"
            )
            lines.append(f"{choice} for the {ASPECT_NAMES[spec['name']]}: {verdict}.")
            self._add("answer", score)
        self.current = self._first_open()
        if len(self.best_picked) == len(self.aspects):
            self.done = True
        return " ".join(lines) + " Your choice is recorded; do not recommend this aspect again."

    def _add(self, component: str, raw: float) -> None:
        self._turn[component] = self._turn.get(component, 0.0) + raw * self.weights[component]

    async def step(self, action: AgentAction) -> StepResult:
        self._turn, self._asked, self._errors = {}, False, {}
        if self.done:
            return StepResult(
                messages=[{"role": "user", "content": "The conversation is over."}], done=True
            )
        if not action.tool_calls and self.rules == "upstream":
            self.done = True
            return no_tool_call_ending(action)
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
        for kind, n in self._errors.items():
            errors[kind] = errors.get(kind, 0) + n
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
