"""Persuasion gym tasks: the built-in claims (`claims.py`); the last 3 are test.

UserRL's claims are not in the public snapshot mua uses, so there is no public loader:
`build_tasks(source=...)` is a UsageError that says so.
"""

from __future__ import annotations

from gyms.common.tasks import by_split, make_task, system_prompt
from gyms.persuade.claims import CLAIMS
from mua.errors import UsageError

GYM_NAME = "persuade"
CHOICES = ("action", "answer")
NUM_TEST_BUILTIN = 3
DESCRIPTION = (
    "You are debating someone who strongly agrees with a claim you oppose. Change their mind with "
    "arguments; after each reply they state their stance on a 7-level scale from Strongly Agree to Strongly Disagree."
)
RULES = (
    "- `action` (or `answer`): your next argument.\n"
    "Address their position directly, bring new points rather than repeating old ones, and stay civil."
)


def first_user(claim: str) -> str:
    return (
        f"Claim I hold (and you oppose): {claim}\nMy stance: Strongly Agree. Convince me otherwise."
    )


def build_tasks(source=None, seed: int = 0, options: dict | None = None) -> dict:
    if source is not None:
        raise UsageError(
            f"{source}: the persuade gym has no public data loader; omit the source to use the built-in claims"
        )
    n = len(CLAIMS)
    system = system_prompt(DESCRIPTION, CHOICES, RULES)
    return by_split(
        [
            make_task(
                GYM_NAME,
                f"persuade-{i:03d}",
                "test" if i >= n - NUM_TEST_BUILTIN else "train",
                system,
                first_user(c["claim"]),
                c,
            )
            for i, c in enumerate(CLAIMS)
        ]
    )
