"""The intention gym's user in the user seat (`mua.users`): the requester, who knows what it
wants and must answer what the assistant asks without volunteering the rest.

Which details a question covers is the scripted judge's decision (keywords), in the seat as
offline. A reply is checked where that decides it: for each covered detail the reply must say
its answer and no other of its options. Volunteering a detail the agent did not ask about is
`mua.users.rules`'s `leak`.
"""

from __future__ import annotations

import random

from gyms.common.text import mentions as says
from gyms.intention.users import scripted_covered, scripted_reply
from mua.gym import Task
from mua.gym.user_seat import UserSeat, strip_choice


def _prompt(task: Task) -> str:
    wants = "\n".join(
        f"- {d['description']}: {d['answer']}" for d in task.payload["missing_details"]
    )
    return (
        f'You asked an assistant: "{task.payload["task"]}". What you want:\n{wants}\n'
        "Answer only what the assistant asks, in one short sentence; never mention a detail "
        "it did not ask about."
    )


def _covered(agent_text: str, task: Task) -> list[dict]:
    details = task.payload["missing_details"]
    return [details[i] for i in scripted_covered(strip_choice(agent_text), details)]


def _scripted(agent_text: str, task: Task) -> str:
    return scripted_reply(_covered(agent_text, task))


def _careless(rng: random.Random, agent_text: str, task: Task) -> str:
    detail = rng.choice(task.payload["missing_details"])
    option = rng.choice(list(detail.get("options") or [detail["answer"]]))
    return f"{detail['description']}: {option}."


def _check(agent_text: str, reply: str, task: Task) -> str | None:
    for detail in _covered(agent_text, task):
        if not says(reply, detail["answer"]):
            return f"asked about {detail['description']!r}, the reply does not say {detail['answer']!r}"
        others = [
            o for o in detail.get("options") or [] if o != detail["answer"] and says(reply, o)
        ]
        if others:
            return f"answered {others[0]!r} for {detail['description']!r}, not {detail['answer']!r}"
    return None


# a reply reaches the gym as {"reply": ...}; one that does not validate as "I'm not sure."
SEAT = UserSeat(
    _prompt,
    _scripted,
    _careless,
    _check,
    as_json=lambda reply, _request=None: {"reply": reply},
    json_fallback={"reply": "I'm not sure."},
)
