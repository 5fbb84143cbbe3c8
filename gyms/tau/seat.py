"""The tau gym's user in the user seat (`mua.users`): the customer, who knows its instruction and
talks to the service agent until its goal is met or cannot be.

The customer keeps a chat of its own (`UserSeat.sees_request`): the policy gets the env's
customer prompt (its rules follow `gym.options.rules`) and first sees the env's greeting, then
each message of the agent; a reply with `###STOP###` ends the conversation. Its truth is the
scripted customer's (`gyms.tau.users.ScriptedCustomer`, from the instruction alone: the seat
does not read the database's profile), replayed over the conversation (`with_history`). A reply
is checked where the agent's message decides it:

- asked for facts the instruction holds (email, name and zip code, user id, order or
  reservation ids), the reply must give each of their values;
- `###STOP###` only once the agent has said the work is done or cannot be done;
- once the agent says so (no question asked) and every wish is told, the reply must end it.

Everything else (the wishes' wording, their order) is not decided; made-up ids are
`mua.users.rules`'s `invented`.
"""

from __future__ import annotations

import copy
import random

from gyms.tau.users import PROMPTS, STOP, ScriptedCustomer, announces_done
from mua.gym import Task
from mua.gym.user_seat import UserSeat


def _replayed(observations: list[str], task: Task) -> tuple[str, ScriptedCustomer]:
    """The scripted customer's reply to the last observation, and the customer as that
    observation found it (its wishes told so far)."""
    customer = ScriptedCustomer(task.payload, None)
    reply, before = customer.opening(), customer
    for text in observations[1:]:
        before = copy.copy(customer)
        reply = customer.answer(text)
    return reply, before


def _careless(rng: random.Random, agent_text: str, task: Task) -> str:
    return rng.choice(
        ["Could you say that again?", f"My zip code is {rng.randint(10000, 99999)}.", STOP]
    )


def _check(observations: list[str], replies: list[str], task: Task) -> str | None:
    if len(observations) < 2:  # the opening: nothing the agent said decides it
        return f"ended the conversation before it began ({STOP})" if STOP in replies[-1] else None
    _, customer = _replayed(observations, task)  # the customer as the agent's message found it
    message, reply = observations[-1], replies[-1]
    for sentence, values in customer.facts_asked(message):
        missing = [v for v in values if v.lower() not in reply.lower()]
        if missing:
            return f"asked for {sentence.split(' is ')[0].lower()}, the reply does not give {missing[0]!r}"
    if STOP in reply and not announces_done(message):
        return "ended the conversation before the agent said the work was done or impossible"
    done = announces_done(message) and "?" not in message
    if done and customer.stated >= len(customer.wishes) and STOP not in reply:
        return f"did not end the conversation ({STOP}) once the agent said the work was done"
    return None


SEAT = UserSeat(
    user_prompt=lambda task: PROMPTS["upstream"](task.payload.get("instruction", "")),
    scripted_reply=lambda texts, task: _replayed(texts, task)[0],
    careless_reply=_careless,
    check=_check,
    with_history=True,
    sees_request=True,
)
