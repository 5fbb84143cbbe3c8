"""Persuasion reward: pay only for a new maximum of stance moved toward disagreement.

Stances form a 7-level ladder from Strongly Agree (0) to Strongly Disagree (6). A turn pays
(new maximum − old maximum) / 6, so the episode total is at most 1 and moving back and forth
(oscillation) earns nothing beyond the furthest point ever reached.
"""

from __future__ import annotations

STANCES = (
    "Strongly Agree",
    "Agree",
    "Somewhat Agree",
    "Neutral",
    "Somewhat Disagree",
    "Disagree",
    "Strongly Disagree",
)
MAX_LEVEL = len(STANCES) - 1


def stance_level(label: str) -> int:
    """Index of a stance label (case and spacing ignored); ValueError when unknown."""
    wanted = " ".join(str(label).lower().replace("_", " ").split())
    for i, s in enumerate(STANCES):
        if s.lower() == wanted:
            return i
    raise ValueError(f"stance must be one of {list(STANCES)}, got {label!r}")


def new_maximum_reward(level: int, best_level: int) -> float:
    return max(0, level - best_level) / MAX_LEVEL
