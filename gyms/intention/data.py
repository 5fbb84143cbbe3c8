"""Intention gym tasks: built-in vague requests (`requests.json`) and UserRL's public intentions.

Every missing detail gets the user's answer fixed in the payload (one of its options, chosen by
a stable hash), so the scripted and LLM users answer consistently. Public details get keywords
derived from their description (content words not already in the request or its category).
Built-in split: the last 4 requests are test. Public split: UserRL's published subsets (380 train / 40 test) when its parquets are at or
under the source, else all of its train and test files (1012 / 95).
"""

from __future__ import annotations

from gyms.common.tasks import (
    builtin_tasks,
    by_split,
    make_task,
    public_splits,
    stable_fraction,
    system_prompt,
)
from gyms.common.text import content_words, stem
from gyms.intention.requests import REQUESTS

GYM_NAME = "intention"
CHOICES = ("action",)
NUM_TEST_BUILTIN = 4
_GENERIC = {
    stem(w)
    for w in (
        "specific",
        "preference",
        "preferred",
        "prefer",
        "type",
        "detail",
        "need",
        "user",
        "information",
        "requirement",
    )
}
DESCRIPTION = (
    "A user gives you a vague request. Before doing anything, find out what they actually want by asking "
    "clarifying questions."
)
RULES = (
    "- `action`: one clarifying question to the user.\n"
    "Ask about one missing detail per question, the most important ones first. The conversation ends when "
    "every important detail is clear; use `finish` when you have nothing left to ask."
)


def first_user(category: str, task: str) -> str:
    return f"Category: {category}\nMy request: {task}\nAsk me whatever you need to know."


def chosen_answer(task_key: str, detail: dict) -> str:
    options = detail.get("options") or []
    if not options:
        return "I have no strong preference."
    return options[int(stable_fraction(f"{task_key}|{detail['description']}") * len(options))]


def derived_keywords(description: str, request: str) -> list[str]:
    """Content words of the description, preferring those not already in the request."""
    words = content_words(description)
    return sorted(words - content_words(request) - _GENERIC or words - _GENERIC or words)


def _task(task_id: str, split: str, row: dict, source: str):
    details = []
    for d in row["missing_details"]:
        keywords = d.get("keywords") or derived_keywords(
            d["description"], f"{row['task']} {row['category']}"
        )
        details.append(d | {"keywords": keywords, "answer": chosen_answer(task_id, d)})
    payload = {"task": row["task"], "category": row["category"], "missing_details": details}
    system = system_prompt(DESCRIPTION, CHOICES, RULES)
    return make_task(
        GYM_NAME, task_id, split, system, first_user(row["category"], row["task"]), payload, source
    )


def build_tasks(source=None, seed: int = 0, options: dict | None = None) -> dict:
    if source is None:
        return builtin_tasks(GYM_NAME, REQUESTS, NUM_TEST_BUILTIN, _task)
    from data_prep.userrl import read_intentions
    from data_prep.userrl_splits import published_splits

    if published_splits(source, GYM_NAME) is None:
        pairs = [(r, s) for s in ("train", "test") for r in read_intentions(source, s)]
    else:  # UserRL trained and tested on subsets of its two files (380 / 40)
        rows = read_intentions(source, "train") + read_intentions(source, "test")
        pairs = public_splits(source, GYM_NAME, rows, "id", 0.0)
    return by_split([_task(f"intention-{r['id']}", s, r, "userrl") for r, s in pairs])
