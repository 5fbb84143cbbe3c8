"""The traveller: answers the agent's messages and reveals preferences, scripted or LLM-backed.

Both kinds share one rule set, tracked by the env: a preference is revealed (at most one per
message) when the agent asks about its aspect, and volunteered by the env after 3 turns without a
preference question. The scripted traveller finds the aspect by keywords (a question that names
no aspect is about the current one) and answers with the preference's stored implicit phrasing.
The LLM traveller gets the trip, the still-hidden preferences, the conversation so far (the
agent's messages and its own replies) and the agent's message, and returns
JSON `{"reply": str, "revealed": [id]}`; a reply that is not valid JSON or reveals an unknown,
already revealed or off-topic id is rejected by the validator (the client retries, then raises
`UserFailure`). Neither kind judges answers: scoring is rule-based in the env.
"""

from __future__ import annotations

import json
import re

from gyms.travel.scenarios import ASPECT_NAMES, find_aspects
from mua.gym.api import JudgeClient, UserFailure

_QUESTION = re.compile(
    r"\?|\b(prefer|preference|like|want|need|important|matter|care|looking for|tell me|wish|require)",
    re.I,
)


def is_preference_question(text: str) -> bool:
    return bool(_QUESTION.search(text))


class Preferences:
    """The trip's preferences with ids (`"<aspect index>.<pref index>"`) and which are revealed."""

    def __init__(self, trip: dict):
        self.trip = trip
        self.revealed: set[str] = set()
        self.closed: set[int] = set()  # aspects already answered, under UserRL's rules

    def drop_aspect(self, aspect_index: int) -> None:
        """Hide the aspect's unrevealed preferences for good (its recommendation is made)."""
        self.closed.add(aspect_index)

    def ids(self, aspect_index: int) -> list[str]:
        return [
            f"{aspect_index}.{j}"
            for j in range(len(self.trip["aspects"][aspect_index]["preferences"]))
        ]

    def text(self, pref_id: str) -> str:
        a, j = (int(x) for x in pref_id.split("."))
        return self.trip["aspects"][a]["preferences"][j]["text"]

    def hidden(self, aspect_index: int) -> list[str]:
        if aspect_index in self.closed:
            return []
        return [p for p in self.ids(aspect_index) if p not in self.revealed]

    def total(self) -> int:
        return sum(len(a["preferences"]) for a in self.trip["aspects"])


def scripted_answer(message: str, prefs: Preferences, current: int) -> tuple[str, list[str]]:
    """The scripted traveller's (reply, revealed ids) to `message`, `current` the aspect a
    question that names none is about."""
    names = [a["name"] for a in prefs.trip["aspects"]]
    mentioned = find_aspects(message, names)
    other = [a for a in find_aspects(message) if a not in names]
    asking = is_preference_question(message)
    if not mentioned and other and asking:
        return f"I don't need a {ASPECT_NAMES[other[0]]} on this trip.", []
    if not mentioned and not asking:
        return "Okay. What else do you need from me?", []
    target = names.index(mentioned[0]) if mentioned else min(current, len(names) - 1)
    hidden = prefs.hidden(target)
    if not hidden:
        return (
            f"I think I've told you everything that matters for the {ASPECT_NAMES[names[target]]}.",
            [],
        )
    return prefs.text(hidden[0]), [hidden[0]]


class ScriptedTraveller:
    """Keyword-driven traveller: deterministic, offline (`scripted_answer`)."""

    async def respond(
        self, message: str, prefs: Preferences, current: int, history: list | None = None
    ) -> tuple[str, list[str]]:
        return scripted_answer(message, prefs, current)


_LLM_SYSTEM = """You play a traveller talking to a travel agent. Stay in character and reply in one or two sentences.
Trip: {trip}
Your hidden preferences (id: preference):
{hidden}
Conversation so far:
{history}
Rules: if the agent asks about an aspect of the trip, reveal at most ONE hidden preference of that aspect, phrased implicitly in your own words (never name attribute values outright). If the agent asks nothing relevant, reveal nothing. Never mention ids.
Reply with JSON only: {{"reply": "<what you say>", "revealed": [<id of the preference you revealed, or nothing>]}}"""


class LLMTraveller:
    """A prompted model behind `ctx.llm`; returns validated JSON."""

    def __init__(self, llm: JudgeClient):
        self.llm = llm

    async def respond(
        self, message: str, prefs: Preferences, current: int, history: list | None = None
    ) -> tuple[str, list[str]]:
        trip = prefs.trip
        aspects = ", ".join(ASPECT_NAMES[a["name"]] for a in trip["aspects"])
        hidden_ids = [p for i in range(len(trip["aspects"])) for p in prefs.hidden(i)]
        hidden = (
            "\n".join(
                f"{p} ({ASPECT_NAMES[trip['aspects'][int(p.split('.')[0])]['name']]}): {prefs.text(p)}"
                for p in hidden_ids
            )
            or "(none left)"
        )
        past = "\n".join(f"Agent: {a}\nYou: {b}" for a, b in history or []) or "(nothing yet)"
        system = _LLM_SYSTEM.format(
            trip=f"{trip['destination']}, needs: {aspects}", hidden=hidden, history=past
        )
        messages = [{"role": "system", "content": system}, {"role": "user", "content": message}]

        def validate(value):
            if isinstance(value, str):
                value = json.loads(value)
            if (
                not isinstance(value, dict)
                or not isinstance(value.get("reply"), str)
                or not value["reply"].strip()
            ):
                raise ValueError('expected {"reply": non-empty string, "revealed": [ids]}')
            revealed = value.get("revealed", [])
            if not isinstance(revealed, list) or len(revealed) > 1:
                raise ValueError('"revealed" must be a list of at most one id')
            revealed = [str(r) for r in revealed]
            bad = [r for r in revealed if r not in hidden_ids]
            if bad:
                raise ValueError(f"unknown or already revealed preference id(s) {bad}")
            return value["reply"].strip(), revealed

        result = await self.llm.complete_json(messages, validate=validate)
        if isinstance(result, tuple):  # clients that return the validator's value
            return result
        try:  # clients that validate but return the parsed JSON itself
            return validate(result)
        except (ValueError, TypeError) as e:
            raise UserFailure(f"traveller reply rejected after validation: {e}") from None
