"""Telepathy reward: pay only improvement over the best guess score so far.

Guess scores are 0 or 1, so in practice the first correct guess pays 1 (and ends the episode)
and repeated guesses cannot collect more.
"""

from __future__ import annotations


def improvement(score: float, best_so_far: float) -> float:
    return max(0.0, score - best_so_far)
