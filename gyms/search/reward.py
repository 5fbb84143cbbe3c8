"""Search reward: normalised exact match against any gold answer pays 1 and ends the episode.

Normalisation: lower case, punctuation and articles removed, spaces squeezed. A miss may be
re-judged by an optional LLM judge (users.py); otherwise it pays 0 and the agent may retry.
"""

from __future__ import annotations

from gyms.common.text import normalize_answer


def exact_match(answer: str, gold: list[str]) -> bool:
    given = normalize_answer(answer)
    return bool(given) and any(given == normalize_answer(g) for g in gold)
