"""Building canonical `Task`s for these gyms: the shared system prompt and deterministic splits.

The system prompt explains the one tool and its bracket form; each gym adds its own rules.
Splits of public data are by a stable hash of the task id (the same on every machine and in
every Python process), so `mua prep` output does not change between runs.
"""

from __future__ import annotations

import hashlib

from mua.gym import Task

_CHOICE_HELP = {
    "action": "`action`: talk to the environment (ask a question, make a move)",
    "search": "`search`: query the environment's search tool or database",
    "answer": "`answer`: submit your answer",
    "finish": "`finish`: end the game (content may be empty)",
}


def system_prompt(description: str, choices: tuple[str, ...], rules: str) -> str:
    """A system message: the game, the tool, its choices (plus `finish`) and the gym's rules."""
    listed = [c for c in ("action", "search", "answer") if c in choices] + ["finish"]
    choice_lines = "\n".join(f"- {_CHOICE_HELP[c]}" for c in listed)
    bracket = " / ".join(f"`[{c}] ...`" for c in listed[:-1]) + " / `[finish]`"
    return (
        f"{description}\n\n"
        "Act by calling the tool `interact_with_env` with a `choice` and a `content`:\n"
        f"{choice_lines}\n"
        f"Without tool calling, write one line in the form {bracket}.\n\n"
        f"{rules}"
    ).strip()


def make_task(
    gym: str,
    task_id: str,
    split: str,
    system: str,
    first_user: str,
    payload: dict,
    source: str = "builtin",
) -> Task:
    prompt = [{"role": "system", "content": system}, {"role": "user", "content": first_user}]
    return Task(
        task_id=task_id, gym=gym, split=split, prompt=prompt, payload=payload, source=source
    )


def task_maker(gym: str, description: str, choices: tuple[str, ...], rules: str, opening):
    """`make(task_id, split, payload, source)`: a task of `gym` that opens with the gym's system
    prompt (`system_prompt`) and the user message `opening(payload)`."""
    system = system_prompt(description, choices, rules)

    def make(task_id: str, split: str, payload: dict, source: str = "builtin") -> Task:
        return make_task(gym, task_id, split, system, opening(payload), payload, source)

    return make


def stable_fraction(key: str) -> float:
    """A number in [0, 1) fixed by `key` (sha256, not Python's salted hash)."""
    return int(hashlib.sha256(key.encode()).hexdigest()[:12], 16) / float(16**12)


def hash_split(task_id: str, test_fraction: float) -> str:
    return "test" if stable_fraction(task_id) < test_fraction else "train"


def by_split(tasks: list[Task]) -> dict[str, list[Task]]:
    out: dict[str, list[Task]] = {"train": [], "test": []}
    for t in tasks:
        out.setdefault(t.split, []).append(t)
    return out


def builtin_tasks(gym: str, items: list, num_test: int, build) -> dict[str, list[Task]]:
    """Tasks from a gym's built-in `items`, in order, with ids `<gym>-000`, `<gym>-001`, ...; the
    last `num_test` go to test. `build(task_id, split, item, source)` makes one task."""
    first_test = len(items) - num_test
    return by_split(
        [
            build(f"{gym}-{i:03d}", "test" if i >= first_test else "train", item, "builtin")
            for i, item in enumerate(items)
        ]
    )


def public_splits(
    source, gym: str, rows: list[dict], key: str, test_fraction: float, hash_key: str = "id"
) -> list[tuple[dict, str]]:
    """(row, split) pairs: UserRL's published splits (joined on `key`) when its parquets are at
    or under `source` (rows they do not name are left out), else a stable hash of `hash_key`
    puts `test_fraction` of the rows in test."""
    from data_prep.userrl_splits import apply_published, published_splits

    published = published_splits(source, gym)
    if published is None:
        return [(r, hash_split(str(r[hash_key]), test_fraction)) for r in rows]
    return apply_published(rows, published, key, str(source))
