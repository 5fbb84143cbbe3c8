"""Telepathy oracle and guess judge: scripted (attribute keywords) and LLM (JSON through ctx.llm).

Scripted oracle: a question naming the entity (or an alias) gets Yes; naming another built-in
entity gets No; otherwise the first attribute whose keywords occur in the question decides Yes
or No; with no attributes (public data) the question's content words are matched against the
entity's description (Yes if one meets it, else No); a question with nothing to match gets
Maybe. It ignores negation ("is it not ...?"). Scripted judge: the guess must mention the name
or an alias as whole words.
"""

from __future__ import annotations

from gyms.common.judge import ask_json, validate_bool_field, validate_yes_no_maybe
from gyms.common.text import content_words, keyword_hit, mentions
from gyms.telepathy.data import ATTRIBUTES, ENTITIES
from mua.gym import GymContext

_OTHER_NAMES = [n for n, aliases, _, _ in ENTITIES] + [
    a for _, aliases, _, _ in ENTITIES for a in aliases
]


def names_of(payload: dict) -> list[str]:
    return [payload["name"], *payload.get("aliases", [])]


def scripted_answer(question: str, payload: dict) -> str:
    if any(mentions(question, n) for n in names_of(payload)):
        return "Yes"
    if any(mentions(question, n) for n in _OTHER_NAMES if n not in names_of(payload)):
        return "No"
    attributes = payload.get("attributes")
    if attributes is not None:
        for attribute, keywords in ATTRIBUTES.items():
            if any(keyword_hit(question, k) for k in keywords):
                return "Yes" if attribute in attributes else "No"
        return "Maybe"
    words = content_words(question)
    if not words:
        return "Maybe"
    known = content_words(" ".join([payload["description"], payload["category"], payload["name"]]))
    return "Yes" if words & known else "No"


def scripted_guess_correct(guess: str, payload: dict) -> bool:
    return any(mentions(guess, n) for n in names_of(payload))


def _entity_text(payload: dict) -> str:
    extra = f" ({payload['description']})" if payload.get("description") else ""
    return f"{payload['name']}{extra}, category: {payload['category']}"


async def llm_answer(ctx: GymContext, question: str, payload: dict) -> str:
    system = (
        "You host a game of twenty questions. The hidden entity is: " + _entity_text(payload) + ". "
        "Answer the player's question truthfully about this entity without naming it. Use Maybe only "
        'when the question cannot be answered with yes or no. Reply with JSON only: {"answer": "Yes" | "No" | "Maybe"}.'
    )
    return await ask_json(ctx, system, f"Question: {question}", validate_yes_no_maybe)


async def llm_guess_correct(ctx: GymContext, guess: str, payload: dict) -> bool:
    system = (
        "You judge a guessing game. The hidden entity is: " + _entity_text(payload) + ". "
        "Decide whether the player's guess names this same entity (synonyms and common names count; "
        'a broader or different entity does not). Reply with JSON only: {"correct": true | false}.'
    )
    return await ask_json(ctx, system, f"Guess: {guess}", validate_bool_field("correct"))
