"""Turtle reward: weighted criterion scores, paid as improvement of the best score so far.

A criterion scores 1 (met), 0.5 (partly met) or 0. The story's score is the weight-sum (weights
sum to 1). Each answer pays `max(0, score − best)`, so the episode total never exceeds 1; the
episode ends once the score reaches 1.0.
"""

from __future__ import annotations

from gyms.common.text import keyword_hit


def scripted_criterion_score(explanation: str, keyword_groups: list[list[str]]) -> float:
    """1 when every keyword group is met, 0.5 when at least half are, else 0 (no groups: 0)."""
    if not keyword_groups:
        return 0.0
    met = sum(1 for group in keyword_groups if any(keyword_hit(explanation, k) for k in group))
    if met == len(keyword_groups):
        return 1.0
    return 0.5 if met * 2 >= len(keyword_groups) else 0.0


def weighted_score(scores: list[float], criteria: list[dict]) -> float:
    return min(1.0, sum(s * c["weight"] for s, c in zip(scores, criteria, strict=False)))
