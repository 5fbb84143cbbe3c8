"""Turtle gym tasks: the built-in stories (`stories.py`) and UserRL's 471 public stories.

Built-in split: the last three stories are test, the rest train. Public stories keep their
weighted criteria (normalised to sum to 1) and get keyword groups derived from each statement's
content words, which is all the scripted judge can use for them. Their split is UserRL's
published one (423 / 48) when its parquets are at or under the source, else 10% test by a
stable hash.
"""

from __future__ import annotations

from gyms.common.tasks import builtin_tasks, by_split, make_task, public_splits, system_prompt
from gyms.common.text import STOPWORDS, content_words
from gyms.turtle.stories import STORIES

GYM_NAME = "turtle"
CHOICES = ("action", "answer")
NUM_TEST_BUILTIN = 3
GENERIC_WORDS = STOPWORDS | {
    "include",
    "includ",
    "reveal",
    "explain",
    "mention",
    "protagonist",
    "even",
    "different",
    "original",
    "logical",
    "logically",
    "justifiable",
    "detail",
    "describ",
    "state",
    "fact",
    "narrativ",
}
DESCRIPTION = (
    "You are playing turtle soup, a lateral-thinking game. You are told the strange surface of a story; "
    "uncover the hidden truth behind it."
)
RULES = (
    "- `action`: one yes-or-no question about the hidden story; the reply is Yes, No or Maybe.\n"
    "- `answer`: your full explanation of what really happened. It is scored against the key points of the "
    "hidden story; you may answer more than once and only improvements count.\n"
    "Ask bold questions to test your theories, then tell the whole story."
)


def first_user(title: str, surface: str) -> str:
    return f"Title: {title}\nSurface: {surface}\nWhat really happened? Ask yes-or-no questions, then tell me the full story."


def normalise_weights(criteria: list[dict]) -> list[dict]:
    total = sum(c["weight"] for c in criteria) or 1.0
    return [dict(c, weight=c["weight"] / total) for c in criteria]


def derived_keywords(statement: str) -> list[list[str]]:
    return [[w] for w in sorted(content_words(statement) - GENERIC_WORDS)]


def _task(task_id: str, split: str, story: dict, source: str):
    payload = {k: story[k] for k in ("title", "surface", "bottom")} | {
        "criteria": normalise_weights(story["criteria"])
    }
    system = system_prompt(DESCRIPTION, CHOICES, RULES)
    return make_task(
        GYM_NAME,
        task_id,
        split,
        system,
        first_user(story["title"], story["surface"]),
        payload,
        source,
    )


def build_tasks(source=None, seed: int = 0, options: dict | None = None) -> dict:
    if source is None:
        return builtin_tasks(GYM_NAME, STORIES, NUM_TEST_BUILTIN, _task)
    from data_prep.userrl import read_turtle_stories

    tasks = []
    rows = read_turtle_stories(source)
    for row, split in public_splits(source, GYM_NAME, rows, "title", 0.1):
        criteria = [dict(c, keywords=derived_keywords(c["statement"])) for c in row["criteria"]]
        tasks.append(
            _task(
                f"turtle-{row['id']}",
                split,
                row | {"criteria": criteria},
                "userrl",
            )
        )
    return by_split(tasks)
