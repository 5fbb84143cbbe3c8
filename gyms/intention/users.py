"""Intention judge and requester: scripted (keywords) and LLM (JSON through ctx.llm).

The judge sees the missing details and decides which ones a question asks about. The
requester never sees that list: it gets the request, the question, and only the answers for
the details the judge said the question covered (so it cannot volunteer the rest, which is the
leak this design closes). Scripted judge: a detail is covered when one of its keywords occurs
in the question; it cannot tell a real question from a keyword dump, and misses paraphrases.
"""

from __future__ import annotations

from typing import Any

from gyms.common.judge import ask_json, validate_index_list
from gyms.common.text import keyword_hit
from mua.gym import GymContext


def scripted_covered(question: str, details: list[dict]) -> list[int]:
    return [
        i for i, d in enumerate(details) if any(keyword_hit(question, k) for k in d["keywords"])
    ]


def scripted_reply(revealed: list[dict]) -> str:
    if not revealed:
        return "I'm not sure what you are asking. Could you ask about something specific to my request?"
    return " ".join(f"{d['description']}: {d['answer']}." for d in revealed)


async def llm_covered(ctx: GymContext, question: str, payload: dict) -> list[int]:
    listed = "\n".join(f"{i}. {d['description']}" for i, d in enumerate(payload["missing_details"]))
    system = (
        f"An assistant is clarifying this vague request: {payload['task']}\n"
        f"These details are missing:\n{listed}\n"
        "Decide which of these details the assistant's question explicitly asks about. "
        'Reply with JSON only: {"covered": [detail numbers, possibly empty]}.'
    )
    return await ask_json(
        ctx, system, f"Question: {question}", validate_index_list(len(payload["missing_details"]))
    )


def _validate_reply(value: Any) -> str:
    reply = value.get("reply") if isinstance(value, dict) else None
    if not isinstance(reply, str) or not reply.strip():
        raise ValueError("'reply' must be a non-empty string")
    return reply.strip()


async def llm_reply(ctx: GymContext, question: str, payload: dict, revealed: list[dict]) -> str:
    if revealed:
        facts = "\n".join(f"- {d['description']}: {d['answer']}" for d in revealed)
        guidance = f"Answer the question using only these facts about what you want:\n{facts}"
    else:
        guidance = "You have nothing specific to add for this question; say so briefly and do not invent details."
    system = (
        f'You are a user who asked an assistant: "{payload["task"]}". Reply in one or two casual sentences. '
        f"{guidance}\nDo not mention anything else you might want. "
        'Reply with JSON only: {"reply": "your reply"}.'
    )
    return await ask_json(ctx, system, f"Assistant: {question}", _validate_reply)
