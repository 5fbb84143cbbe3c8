"""The search gym's optional LLM judge for answers that miss the exact match.

It sees the question, the gold answers and the agent's answer and replies
`{"correct": true|false}`; failures after retries raise `UserFailure`. There is no simulated
user in this gym: the "environment" is the search backend.
"""

from __future__ import annotations

from gyms.common.judge import ask_json, validate_bool_field
from mua.gym import GymContext


async def llm_answer_correct(ctx: GymContext, question: str, gold: list[str], answer: str) -> bool:
    system = (
        "You grade short answers to a question. Decide whether the given answer means the same as one of the "
        "gold answers (different wording, units or formatting are fine; a different or vaguer answer is not).\n"
        f"Question: {question}\nGold answers: {'; '.join(gold)}\n"
        'Reply with JSON only: {"correct": true | false}.'
    )
    return await ask_json(ctx, system, f"Answer: {answer}", validate_bool_field("correct"))
