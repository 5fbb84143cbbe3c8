"""What a gym tells the user seat (`GymSpec.user_seat`): how its user is briefed and judged,
and the checks of a `gyms:` entry with `seat: user`.

`UserSeat` holds pure functions of the task and the agent's message: the user's system prompt, the
scripted user's true and careless replies, the gym's consistency check, and a reply as the JSON
its LLM user would send. `check_seat(where, entry, spec)` refuses in one line an entry the seat
cannot take. Not here: running an episode (`mua.users.seat_env`), scoring (`mua.users.fidelity`).
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mua.errors import UsageError
from mua.gym.api import Task

_BRACKET = re.compile(r"^\s*\[\s*[a-z_]+\s*\]\s*", re.I)


def first_word(text: str) -> str:
    """The reply's first word, lower-cased, without punctuation ("" when it has none)."""
    match = re.search(r"[a-z]+", str(text).lower())
    return match.group(0) if match else ""


def strip_choice(text: str) -> str:
    """`[action] Is it red?` -> `Is it red?` (the agent's message without its bracket choice)."""
    return _BRACKET.sub("", str(text or ""), count=1).strip()


YES_NO_MAYBE = ("yes", "no", "maybe")


def yes_no_check(reply: str, truth: str | None) -> str | None:
    """The check of a Yes/No/Maybe user: the reply's first word must be one of the three, and
    `truth` (Yes or No, None where the hidden answer does not decide the question) where given."""
    said = first_word(reply)
    if said not in YES_NO_MAYBE:
        return f"the reply {reply[:30]!r} is not Yes, No or Maybe"
    if truth is not None and said != truth.lower():
        return f"answered {said!r} where the hidden answer is {truth!r}"
    return None


def yes_no_json(reply: str, request: list[dict] | None = None) -> dict:
    """A Yes/No/Maybe reply as the JSON the gyms' LLM oracles send: `{"answer": "Yes"}`."""
    return {"answer": first_word(reply).capitalize()}


@dataclass
class UserSeat:
    """How a gym's user is played from the seat.

    user_prompt(task) -> str: the policy's system message (the user's role, hidden instructions).
    scripted_reply(agent_text, task) -> str: what the gym's scripted user answers.
    careless_reply(rng, agent_text, task) -> str: a plausible but unchecked reply (warm-start
    noise: drawn instead of the scripted one with probability `gym.options.user_noise`).
    check(agent_text, reply, task) -> str | None: why the reply is inconsistent with the hidden
    truth, or None when it is consistent or the truth does not decide it.
    as_json(reply, request) -> value: the reply as the JSON the gym's LLM user sends through
    `complete_json` (None: the gym's user only uses `complete`); `request` is the messages the
    gym's user would have sent its model (travel reads the still-hidden preference ids there);
    `json_fallback` is what the env gets when the reply does not validate (the turn is then
    found inconsistent by `check`).

    A user whose truth depends on the conversation so far (persuade: the stance follows the
    points raised) gives `with_history`: then `scripted_reply` and `check` get the agent's
    messages so far (oldest first, the current one last) instead of the current one, and
    `check` gets the user's replies so far (the current one last) instead of one reply.

    A user that keeps a chat of its own with its model (tau, tau2) gives `sees_request`: the
    policy's system message is that chat's system message (the gym's own user prompt, rules and
    tools included) and each observation is the chat's latest message: the env's greeting before
    the agent has spoken, the agent's message, or the result of the user's own tool call (tau2).
    `user_prompt(task)` is then used only when no request has come. Such a seat's
    `scripted_reply` and `check` get the observations so far (with `with_history`).
    """

    user_prompt: Callable[[Task], str]
    scripted_reply: Callable[[Any, Task], str]
    careless_reply: Callable[[random.Random, str, Task], str]
    check: Callable[[Any, Any, Task], str | None]
    as_json: Callable[[str, list[dict] | None], Any] | None = None
    json_fallback: Any = None
    with_history: bool = False
    sees_request: bool = False

    def reply_to(self, agent_texts: list[str], task: Task) -> str:
        """The scripted user's reply to the last of `agent_texts` (all of the agent's so far)."""
        return self.scripted_reply(agent_texts if self.with_history else agent_texts[-1], task)

    def finding(self, agent_texts: list[str], replies: list[str], task: Task) -> str | None:
        """Why the last reply is inconsistent (`check`), given the conversation so far."""
        if self.with_history:
            return self.check(agent_texts, replies, task)
        return self.check(agent_texts[-1], replies[-1], task)


def yes_no_seat(
    user_prompt: Callable[[Task], str],
    truth: Callable[[str, Task], str | None],
    scripted_reply: Callable[[str, Task], str],
) -> UserSeat:
    """The seat of an oracle that answers Yes, No or Maybe (telepathy, turtle): a careless reply
    is any of the three, a reply is checked by `yes_no_check` against `truth(agent_text, task)`,
    and it reaches the gym as `{"answer": ...}` (`Maybe` when it is none of the three)."""
    return UserSeat(
        user_prompt=user_prompt,
        scripted_reply=scripted_reply,
        careless_reply=lambda rng, _text, _task: rng.choice(("Yes", "No", "Maybe")),
        check=lambda text, reply, task: yes_no_check(reply, truth(text, task)),
        as_json=yes_no_json,
        json_fallback={"answer": "Maybe"},
    )


def seat_gyms() -> list[str]:
    """The registered gyms whose user can take the seat."""
    from mua.gym.registry import get_gym, list_gyms

    return [n for n in list_gyms() if getattr(get_gym(n), "user_seat", None) is not None]


def check_seat(where: str, entry, spec) -> None:
    """Refuse an entry that cannot put the policy in its gym's user seat (one line)."""
    if entry.seat != "user":
        return
    if spec.user_seat is None:
        raise UsageError(
            f"{where}: gym {entry.name} has no user that can take the seat (seat: user works "
            f"with {', '.join(seat_gyms())}); remove `seat: user` or pick one of those gyms"
        )
    if entry.seat_agent().kind == "expert" and spec.expert is None:
        raise UsageError(
            f"{where}: gym {entry.name} has no scripted expert to play the agent; give "
            "`agent: {kind: llm, base_url: ..., model: ...}`"
        )
    for key, is_set in (
        ("user", entry.user is not None),
        ("program", entry.program is not None),
        ("reward_weights", bool(entry.reward_weights)),
    ):
        if is_set:
            raise UsageError(
                f"{where}: {key} does not apply with seat: user (the policy is the user and is "
                "rewarded by fidelity, docs/user_seat.md); remove it from the entry"
            )
