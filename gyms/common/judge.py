"""Asking the LLM user or judge for JSON, and validators for the shapes these gyms expect.

`ask_json(ctx, system, user, validate)` sends two messages through `ctx.llm.complete_json`;
the client retries malformed replies and raises `UserFailure` when retries are spent, which
propagates (never a silent reward of 0). Validators raise `ValueError` with a reason the
client can log; they return the cleaned value.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mua.gym import GymContext, UserFailure

YES_NO_MAYBE = ("Yes", "No", "Maybe")


async def ask_json(ctx: GymContext, system: str, user: str, validate: Callable[[Any], Any]) -> Any:
    if ctx.llm is None:
        raise UserFailure("no LLM client configured for an LLM-judged step")
    messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
    return await ctx.llm.complete_json(messages, validate=validate)


def _need_object(value: Any) -> dict:
    if not isinstance(value, dict):
        raise ValueError(f"expected a JSON object, got {type(value).__name__}")
    return value


def validate_yes_no_maybe(value: Any) -> str:
    """{"answer": "Yes"|"No"|"Maybe"} -> the answer."""
    answer = str(_need_object(value).get("answer", "")).strip().rstrip(".").capitalize()
    if answer not in YES_NO_MAYBE:
        raise ValueError(
            f"'answer' must be one of {list(YES_NO_MAYBE)}, got {value.get('answer')!r}"
        )
    return answer


def validate_bool_field(name: str) -> Callable[[Any], bool]:
    """{name: true|false} -> the boolean."""

    def check(value: Any) -> bool:
        field = _need_object(value).get(name)
        if not isinstance(field, bool):
            raise ValueError(f"{name!r} must be true or false, got {field!r}")
        return field

    return check


def validate_score_list(
    n_items: int, allowed: tuple[float, ...] = (0.0, 0.5, 1.0)
) -> Callable[[Any], list[float]]:
    """{"scores": [..n_items numbers from `allowed`..]} -> the list."""

    def check(value: Any) -> list[float]:
        scores = _need_object(value).get("scores")
        if not isinstance(scores, list) or len(scores) != n_items:
            raise ValueError(f"'scores' must be a list of {n_items} numbers")
        out = []
        for s in scores:
            if isinstance(s, bool) or not isinstance(s, (int, float)) or float(s) not in allowed:
                raise ValueError(f"each score must be one of {list(allowed)}, got {s!r}")
            out.append(float(s))
        return out

    return check


def validate_index_list(n_items: int) -> Callable[[Any], list[int]]:
    """{"covered": [indices in 0..n_items-1]} -> sorted unique indices."""

    def check(value: Any) -> list[int]:
        covered = _need_object(value).get("covered")
        if not isinstance(covered, list):
            raise ValueError("'covered' must be a list of detail numbers")
        out = set()
        for i in covered:
            if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < n_items:
                raise ValueError(
                    f"each entry of 'covered' must be an integer in 0..{n_items - 1}, got {i!r}"
                )
            out.add(i)
        return sorted(out)

    return check
