"""Turtle oracle and explanation judge: scripted (word overlap, keyword groups) and LLM (JSON).

Scripted oracle: the question's content words are compared with the hidden bottom's: at least
half of them in the bottom -> Yes, some -> Maybe, none -> No (no question words -> Maybe).
It cannot understand negation, tense or logic; a question that reuses the bottom's words gets
Yes even when it asserts the opposite. Scripted judge: each criterion's keyword groups
(`reward.scripted_criterion_score`).
"""

from __future__ import annotations

from gyms.common.judge import ask_json, validate_score_list, validate_yes_no_maybe
from gyms.common.text import content_words
from gyms.turtle.reward import scripted_criterion_score
from mua.gym import GymContext


def scripted_answer(question: str, payload: dict) -> str:
    words = content_words(question)
    if not words:
        return "Maybe"
    shared = words & content_words(payload["bottom"])
    if len(shared) * 2 >= len(words):
        return "Yes"
    return "Maybe" if shared else "No"


def scripted_scores(explanation: str, payload: dict) -> list[float]:
    return [
        scripted_criterion_score(explanation, c.get("keywords") or []) for c in payload["criteria"]
    ]


def _story_text(payload: dict) -> str:
    return f"Surface: {payload['surface']}\nHidden truth (bottom): {payload['bottom']}"


async def llm_answer(ctx: GymContext, question: str, payload: dict) -> str:
    system = (
        "You host a turtle-soup lateral-thinking game. The player knows only the surface.\n"
        + _story_text(payload)
        + "\nAnswer the player's yes-or-no question truthfully about the hidden truth, without revealing more. "
        'Use Maybe when the question is irrelevant or cannot be answered. Reply with JSON only: {"answer": "Yes" | "No" | "Maybe"}.'
    )
    return await ask_json(ctx, system, f"Question: {question}", validate_yes_no_maybe)


async def llm_scores(ctx: GymContext, explanation: str, payload: dict) -> list[float]:
    criteria = payload["criteria"]
    listed = "\n".join(f"{i}. {c['statement']}" for i, c in enumerate(criteria))
    system = (
        "You judge a turtle-soup game.\n"
        + _story_text(payload)
        + f"\nScore the player's explanation against each criterion: 1 if fully met, 0.5 if partly met, 0 if not.\n"
        f"Criteria:\n{listed}\n"
        f'Reply with JSON only: {{"scores": [one number per criterion, {len(criteria)} in all]}}.'
    )
    return await ask_json(
        ctx, system, f"Explanation: {explanation}", validate_score_list(len(criteria))
    )
