"""Intention reward: per question, the most important newly covered detail minus overlap.

Importance 3 -> 1.0, 2 -> 0.7, 1 -> 0.4 for the most important detail the question newly
covers; −0.2 for every further detail it newly covers at once (one question, one detail);
floored at 0. Details already covered earlier earn nothing again.
"""

from __future__ import annotations

IMPORTANCE_REWARD = {3: 1.0, 2: 0.7, 1: 0.4}
EXTRA_DETAIL_PENALTY = 0.2


def question_reward(newly_covered_importances: list[int]) -> float:
    if not newly_covered_importances:
        return 0.0
    best = IMPORTANCE_REWARD[max(newly_covered_importances)]
    return max(0.0, best - EXTRA_DETAIL_PENALTY * (len(newly_covered_importances) - 1))
