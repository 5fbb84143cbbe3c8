"""Function gym reward: an answer within 1e-6 of the true value earns 1 and ends the episode.

A wrong answer earns 0 and the agent may try again. Answers are parsed from the content as a
number or a simple fraction ("7/3"); anything else is reported back, never scored.
"""

from __future__ import annotations

import re

TOLERANCE = 1e-6
_NUMBER = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"
_FRACTION = re.compile(rf"^\s*({_NUMBER})\s*/\s*({_NUMBER})\s*$")
_ONE_NUMBER = re.compile(rf"({_NUMBER})")


def parse_answer(content: str) -> float | None:
    """The number in `content`: a fraction 'p/q', else the last number; None when there is none."""
    text = content.strip().rstrip(".").replace(",", "")
    frac = _FRACTION.match(text)
    if frac:
        denominator = float(frac.group(2))
        return float(frac.group(1)) / denominator if denominator else None
    numbers = _ONE_NUMBER.findall(text)
    return float(numbers[-1]) if numbers else None


def answer_correct(value: float, truth: float) -> bool:
    return abs(value - truth) <= TOLERANCE
