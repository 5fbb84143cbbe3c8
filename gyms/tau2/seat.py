"""The tau2 gym's user in the user seat (`mua.users`): the customer of tau2's scenario, with the
tools of its own device where the domain gives it some (telecom).

The customer keeps a chat of its own (`UserSeat.sees_request`): the policy gets the env's user
prompt (tau2's guidelines, the scenario, its tools and how to call them), first sees the
greeting, then each message of the agent and, after a reply that is a tool call
(`{"tool_call": {"name": ..., "arguments": {...}}}`), that call's result, which the env ran on
the user's side of the domain as it runs the LLM user's. Its truth is the generic scripted
customer's (`gyms.tau2.users.ScriptedUser`, also for telecom, whose own scripted user works
the phone by its state, which the seat does not see), replayed over the conversation
(`with_history`): the gold user actions in order, each done when the agent names it. A reply is
checked where the agent's message decides it:

- the agent names the next gold user action: the reply calls that tool;
- `###STOP###` (or a transfer or out-of-scope token) only once the agent said the work is done;
- once the agent says so (no question asked) and no gold user action is left, the reply ends it.

Everything else (what the customer says, the arguments of its calls: the env scores the
result) is not decided.
"""

from __future__ import annotations

import copy
import json
import random
import re

from gyms.tau2.users import (
    STOP,
    ScriptedUser,
    announces_done,
    is_stop,
    parse_tool_call,
    scenario_text,
)
from mua.gym import Task
from mua.gym.user_seat import UserSeat

_TOOL_RESULT = re.compile(r"^\[Tool (?:result|error) from ([^\]]+)\]\n?(.*)$", re.S)


def _call_text(action: dict) -> str:
    arguments = dict(action.get("arguments") or {})
    return json.dumps({"tool_call": {"name": action["name"], "arguments": arguments}})


def _replayed(observations: list[str], task: Task) -> tuple[str, ScriptedUser, str]:
    """The scripted customer's reply to the last observation, that customer as the observation
    found it, and the agent message the last observation belongs to (lower-cased)."""
    user = ScriptedUser(None, task.payload["task"])
    reply, before, asked, results = user.opening(), user, "", []
    for text in observations[1:]:
        before = copy.copy(user)
        before.pending = list(user.pending)
        done = _TOOL_RESULT.match(text)
        if done:
            results.append(f"I did {done.group(1)}: {done.group(2).strip()}")
        else:
            asked, results = text.lower(), []
        if user.pending and user.pending[0]["name"].lower() in asked:
            reply = _call_text(user.pending.pop(0))
        elif results:
            reply = " ".join(results)
        else:
            reply = user.say(asked)
    return reply, before, asked


def _careless(rng: random.Random, agent_text: str, task: Task) -> str:
    return rng.choice(["Okay.", "I don't know.", STOP])


def _check(observations: list[str], replies: list[str], task: Task) -> str | None:
    reply = replies[-1]
    if len(observations) < 2:
        return "ended the conversation before it began" if is_stop(reply) else None
    _, user, asked = _replayed(observations, task)
    call = parse_tool_call(reply)
    if user.pending and user.pending[0]["name"].lower() in asked:
        wanted = user.pending[0]["name"]
        if call is None or call.get("name") != wanted:
            return f"asked to do {wanted} on the device, the reply does not call it"
        return None
    if _TOOL_RESULT.match(observations[-1]):
        return None  # the user reports what it did: not decided
    if is_stop(reply) and not announces_done(asked):
        return "ended the conversation before the agent said the work was done"
    done = announces_done(asked) and "?" not in asked
    if done and not user.pending and not is_stop(reply):
        return f"did not end the conversation ({STOP}) once the agent said the work was done"
    return None


SEAT = UserSeat(
    user_prompt=lambda task: scenario_text(task.payload["task"].get("user_scenario") or {}),
    scripted_reply=lambda texts, task: _replayed(texts, task)[0],
    careless_reply=_careless,
    check=_check,
    with_history=True,
    sees_request=True,
)
