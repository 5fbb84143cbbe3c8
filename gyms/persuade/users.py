"""The persuadee: scripted (counter-argument keywords) and LLM (JSON reply with a stance).

Scripted: each counter-argument of the claim that the agent raises for the first time moves the
stance two levels toward Strongly Disagree; repeating a point, or saying nothing relevant,
leaves it where it is. It cannot weigh the quality of an argument, only whether a listed point
is mentioned. LLM: the persuadee sees the claim, its own initial argument for it (public
claims carry one), its previous stance and the conversation so far, and replies
`{"reply": ..., "stance": one of the seven labels}`.
"""

from __future__ import annotations

from typing import Any

from gyms.common.judge import ask_json
from gyms.common.text import keyword_hit
from gyms.persuade.reward import MAX_LEVEL, STANCES, stance_level
from mua.gym import GymContext

STEPS_PER_POINT = 2


def scripted_turn(message: str, payload: dict, raised: set[int], level: int) -> tuple[str, int]:
    """(reply, new level) after `message`; adds newly raised points to `raised`."""
    new = [
        i
        for i, p in enumerate(payload["points"])
        if i not in raised and any(keyword_hit(message, k) for k in p["keywords"])
    ]
    raised.update(new)
    level = min(MAX_LEVEL, level + STEPS_PER_POINT * len(new))
    if new:
        said = " ".join(payload["points"][i]["point"] for i in new)
        reply = f"That is a fair point: {said} I am reconsidering."
    else:
        reply = "I don't find that convincing. I still believe: " + payload["claim"]
    return f"{reply} My stance: {STANCES[level]}.", level


def _validate(value: Any) -> tuple[str, int]:
    if (
        not isinstance(value, dict)
        or not isinstance(value.get("reply"), str)
        or not value["reply"].strip()
    ):
        raise ValueError("expected {'reply': non-empty string, 'stance': label}")
    return value["reply"].strip(), stance_level(value.get("stance", ""))


async def llm_turn(
    ctx: GymContext, message: str, payload: dict, history: list[tuple[str, str]], level: int = 0
) -> tuple[str, int]:
    past = "\n".join(f"Persuader: {a}\nYou: {b}" for a, b in history) or "(nothing yet)"
    argument = payload.get("argument") or ""
    reasoning = f"Your initial argument for it:\n{argument}\n" if argument else ""
    system = (
        f'You firmly believe this claim: "{payload["claim"]}". Someone is trying to change your mind. Stay in '
        "character, concede only to arguments that are actually convincing, and report your stance honestly.\n"
        f"{reasoning}"
        f"Your previous stance: {STANCES[level]}.\n"
        f"Conversation so far:\n{past}\n"
        f"Stances: {', '.join(STANCES)}.\n"
        'Reply with JSON only: {"reply": "your answer", "stance": "one of the stances"}.'
    )
    return await ask_json(ctx, system, f"Persuader: {message}", _validate)
