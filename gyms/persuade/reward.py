"""Persuasion reward: stance moved toward disagreement, two rules.

Stances form a 7-level ladder from Strongly Agree (0) to Strongly Disagree (6).
`forward_move_reward` (UserRL's rule, `rules: upstream`): every turn that moves the stance
forward pays levels moved / 6 (rounded to 6 decimals as UserRL does), whatever came before, so
a persuadee that slides back and forth pays again for each forward move. `new_maximum_reward`
(`rules: mua`): a turn pays (new maximum − old maximum) / 6, so the episode total is at most 1
and oscillation earns nothing beyond the furthest point ever reached.
"""

from __future__ import annotations

STANCES = (
    "Strongly Agree",
    "Agree",
    "Partly Agree",
    "Neutral",
    "Partly Disagree",
    "Disagree",
    "Strongly Disagree",
)
MAX_LEVEL = len(STANCES) - 1
_ALIASES = {"somewhat agree": "partly agree", "somewhat disagree": "partly disagree"}


def stance_level(label: str) -> int:
    """Index of a stance label (case and spacing ignored); ValueError when unknown."""
    wanted = " ".join(str(label).lower().replace("_", " ").split())
    wanted = _ALIASES.get(wanted, wanted)
    for i, s in enumerate(STANCES):
        if s.lower() == wanted:
            return i
    raise ValueError(f"stance must be one of {list(STANCES)}, got {label!r}")


def new_maximum_reward(level: int, best_level: int) -> float:
    return max(0, level - best_level) / MAX_LEVEL


def forward_move_reward(level: int, previous_level: int) -> float:
    return round(max(0, level - previous_level) / MAX_LEVEL, 6)
