"""Persuasion gym tasks: the built-in claims (`claims.py`; the last 3 are test) and UserRL's claims.

UserRL's claims (id, claim, and the persuadee's own initial argument for it) are public only
inside its `persuasion_multiturn/{train,test}.parquet`; `build_tasks(source=...)` reads them
with their published split (378 train / 42 test). Public claims carry no scripted
counter-arguments (`points` is empty), so only the LLM persuadee can be moved on them.
"""

from __future__ import annotations

from gyms.common.tasks import builtin_tasks, by_split, task_maker
from gyms.persuade.claims import CLAIMS

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


_task = task_maker(
    GYM_NAME, DESCRIPTION, CHOICES, RULES, lambda payload: first_user(payload["claim"])
)


def build_tasks(source=None, seed: int = 0, options: dict | None = None) -> dict:
    if source is not None:
        from data_prep.userrl_splits import read_persuasion

        return by_split(
            [
                _task(
                    f"persuade-{row['id']}",
                    split,
                    {"claim": row["claim"], "argument": row["argument"], "points": []},
                    "userrl",
                )
                for row, split in read_persuasion(source)
            ]
        )
    return builtin_tasks(GYM_NAME, CLAIMS, NUM_TEST_BUILTIN, _task)
