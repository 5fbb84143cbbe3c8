"""The persuade gym's user in the user seat (`mua.users`): the persuadee, who holds the claim and
moves only for its listed counter-points.

Its truth depends on the conversation so far (`UserSeat.with_history`): the scripted persuadee
moves two levels toward Strongly Disagree for each counter-point of the claim the agent raises
for the first time (`gyms.persuade.users.scripted_turn`). A reply must end with `My stance:
<label>` (one of the seven), and that stance must be the scripted persuadee's after the agent's
messages so far; otherwise the turn is `inconsistent`. The reply reaches the env as the LLM
persuadee's JSON, `{"reply": <text before the stance>, "stance": <label>}`.
"""

from __future__ import annotations

import random
import re

from gyms.persuade.reward import STANCES, stance_level
from gyms.persuade.users import scripted_turn
from mua.gym import Task
from mua.gym.user_seat import UserSeat, strip_choice

_STANCE = re.compile(r"my stance\s*(?:is)?\s*:?\s*([a-z ]+?)\s*[.!]?\s*$", re.I)


def _prompt(task: Task) -> str:
    argument = task.payload.get("argument") or ""
    reasoning = f" Your argument for it: {argument}" if argument else ""
    return (
        f'You firmly believe this claim: "{task.payload["claim"]}".{reasoning} Someone will try to '
        "change your mind. Concede only to arguments that raise a real counter-point, and end "
        f"every reply with 'My stance: <stance>', one of: {', '.join(STANCES)}."
    )


def said_stance(reply: str) -> tuple[str, int] | None:
    """(the reply's text before the stance, the stance's level), or None without a stance."""
    match = _STANCE.search(str(reply).strip())
    if match is None:
        return None
    try:
        level = stance_level(match.group(1))
    except ValueError:
        return None
    return str(reply)[: match.start()].strip(), level


def _scripted(agent_texts: list[str], task: Task) -> tuple[str, int]:
    """The scripted persuadee's (reply, level) after the agent's messages so far."""
    raised: set[int] = set()
    reply, level = "", 0
    for text in agent_texts:
        reply, level = scripted_turn(strip_choice(text), task.payload, raised, level)
    return reply, level


def _careless(rng: random.Random, agent_text: str, task: Task) -> str:
    return f"I see what you mean. My stance: {rng.choice(STANCES)}."


def _check(agent_texts: list[str], replies: list[str], task: Task) -> str | None:
    said = said_stance(replies[-1])
    if said is None:
        return f"the reply {replies[-1][:30]!r} does not end with 'My stance: <stance>'"
    truth = _scripted(agent_texts, task)[1]
    if said[1] != truth:
        return f"stance {STANCES[said[1]]!r} where the points raised so far give {STANCES[truth]!r}"
    return None


def _as_json(reply: str, request: list[dict] | None = None) -> dict:
    said = said_stance(reply)
    if said is None:
        raise ValueError("no stance")
    return {"reply": said[0] or "(no words)", "stance": STANCES[said[1]]}


SEAT = UserSeat(
    user_prompt=_prompt,
    scripted_reply=lambda texts, task: _scripted(texts, task)[0],
    careless_reply=_careless,
    check=_check,
    as_json=_as_json,
    json_fallback={"reply": "(no stance given)", "stance": STANCES[0]},
    with_history=True,
)
