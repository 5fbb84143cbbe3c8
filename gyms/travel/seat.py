"""The travel gym's user in the user seat (`mua.users`): the traveller, who knows its preferences
and tells one, when the agent asks about its part of the trip.

The policy's prompt lists the trip's aspects and every preference under its aspect. Its truth
follows the conversation (`UserSeat.with_history`): a preference counts as stated once a reply
says it (`states`: its words, or most of its content words). A reply is checked where the
agent's message decides it (the message's aspects by keyword, as the scripted traveller finds
them):

- a message that asks about no preference gets no preference;
- a question naming an aspect of the trip gets one preference of that aspect not stated yet,
  and none of another aspect (once all of its preferences are stated, none);
- a question naming only an aspect the trip does not need gets no preference;
- no reply states more than one preference.

A question that names no aspect is not decided (the scripted traveller answers it for the
aspect in progress, which the seat does not see). A reply reaches the env as the LLM
traveller's JSON, `{"reply": text, "revealed": [id]}`, the id that of the first still-hidden
preference it states, read from the env's own request (its hidden list); the env keeps its
rules (closed aspects, proactive reveals), which the checks do not model.
"""

from __future__ import annotations

import random
import re

from gyms.travel.scenarios import ASPECT_NAMES, find_aspects
from gyms.travel.users import Preferences, is_preference_question, scripted_answer
from mua.gym import Task
from mua.gym.user_seat import UserSeat, strip_choice

_WORD = re.compile(r"[a-z0-9']+")
_HIDDEN_LINE = re.compile(r"^(\d+\.\d+) \([^)]*\): (.+)$", re.M)
MIN_SHARED_WORDS = 0.6


def _words(text: str) -> list[str]:
    return _WORD.findall(str(text).lower())


def states(reply: str, preference: str) -> bool:
    """Whether `reply` says `preference`: its words in order, or at least MIN_SHARED_WORDS of
    its content words (longer than three letters)."""
    said, wanted = _words(reply), _words(preference)
    if " ".join(wanted) in " ".join(said):
        return True
    content = [w for w in wanted if len(w) > 3]
    return bool(content) and sum(w in said for w in content) >= MIN_SHARED_WORDS * len(content)


def _all_ids(prefs: Preferences) -> list[str]:
    return [p for i in range(len(prefs.trip["aspects"])) for p in prefs.ids(i)]


def stated_ids(reply: str, task: Task) -> list[str]:
    """The ids of the trip's preferences `reply` states."""
    prefs = Preferences(task.payload)
    return [p for p in _all_ids(prefs) if states(reply, prefs.text(p))]


def _prompt(task: Task) -> str:
    trip = task.payload
    lines = "\n".join(
        f"- {ASPECT_NAMES[a['name']]}: " + " ".join(p["text"] for p in a["preferences"])
        for a in trip["aspects"]
    )
    return (
        f"You are a traveller planning a trip to {trip['destination']} with a travel agent. "
        f"What matters to you, by part of the trip:\n{lines}\n"
        "Answer in one or two sentences. When the agent asks about a part of the trip, tell one "
        "thing that matters to you about it that you have not told yet; never tell anything the "
        "agent did not ask about."
    )


def _replayed(agent_texts: list[str], task: Task) -> tuple[str, Preferences]:
    """The scripted traveller's reply to the last message, and the preferences it had stated."""
    prefs = Preferences(task.payload)
    reply = ""
    for text in agent_texts:
        current = next((i for i in range(len(prefs.trip["aspects"])) if prefs.hidden(i)), 0)
        reply, revealed = scripted_answer(strip_choice(text), prefs, current)
        prefs.revealed.update(revealed)
    return reply, prefs


def _careless(rng: random.Random, agent_text: str, task: Task) -> str:
    aspect = rng.choice(task.payload["aspects"])
    return rng.choice([rng.choice(aspect["preferences"])["text"], "Okay, sounds good."])


def _check(agent_texts: list[str], replies: list[str], task: Task) -> str | None:
    message = strip_choice(agent_texts[-1])
    said = stated_ids(replies[-1], task)
    if len(said) > 1:
        return f"states {len(said)} preferences in one reply (one per question)"
    if not is_preference_question(message):
        return f"told preference {said[0]} though the agent asked about none" if said else None
    names = [a["name"] for a in task.payload["aspects"]]
    asked = [names.index(a) for a in find_aspects(message, names)]
    if not asked:
        if said and find_aspects(message):
            return f"told preference {said[0]} when asked about an aspect the trip does not need"
        return None
    if said and int(said[0].split(".")[0]) not in asked:
        return f"told preference {said[0]} of another aspect than the one asked about"
    stated = {p for reply in replies[:-1] for p in stated_ids(reply, task)}
    unsaid = [p for p in _all_ids(Preferences(task.payload)) if p not in stated]
    open_ = [p for p in unsaid if int(p.split(".")[0]) in asked]
    if open_ and not (said and said[0] in open_):
        return f"asked about the {ASPECT_NAMES[names[asked[0]]]}, told none of its preferences not yet told"
    return None


def _as_json(reply: str, request: list[dict] | None = None) -> dict:
    if not str(reply).strip():
        raise ValueError("empty reply")
    system = str((request or [{}])[0].get("content") or "")
    hidden = [(m.group(1), m.group(2)) for m in _HIDDEN_LINE.finditer(system)]
    revealed = next((pid for pid, text in hidden if states(reply, text)), None)
    return {"reply": reply.strip(), "revealed": [revealed] if revealed else []}


SEAT = UserSeat(
    user_prompt=_prompt,
    scripted_reply=lambda texts, task: _replayed(texts, task)[0],
    careless_reply=_careless,
    check=_check,
    as_json=_as_json,
    json_fallback={"reply": "(no reply)", "revealed": []},
    with_history=True,
)
