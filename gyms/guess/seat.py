"""The guess gym's user in the user seat (`mua.users`): it holds the number and says higher,
lower or correct. The truth is decidable for every guess, so every reply is checked."""

from __future__ import annotations

import random
import re

from gyms.guess.env import user_prompt, verdict_word
from mua.gym import Task
from mua.gym.user_seat import UserSeat, first_word

_GUESS = re.compile(r"[-+]?\d+")


def _guess(agent_text: str) -> int | None:
    match = _GUESS.search(agent_text or "")
    return int(match.group(0)) if match else None


def _prompt(task: Task) -> str:
    return user_prompt(int(task.payload["target"]), int(task.payload.get("max_number", 16)))


def _scripted(agent_text: str, task: Task) -> str:
    guess = _guess(agent_text)
    return verdict_word(guess, int(task.payload["target"])) if guess is not None else "higher"


def _careless(rng: random.Random, agent_text: str, task: Task) -> str:
    return rng.choice(("higher", "lower", "correct"))


def _check(agent_text: str, reply: str, task: Task) -> str | None:
    guess = _guess(agent_text)
    if guess is None:
        return None
    truth = verdict_word(guess, int(task.payload["target"]))
    said = first_word(reply)
    if said != truth:
        return f"the reply to {guess} was {said or reply[:20]!r}, the truth is {truth!r}"
    return None


SEAT = UserSeat(
    user_prompt=_prompt, scripted_reply=_scripted, careless_reply=_careless, check=_check
)
