"""Travel tasks: procedurally generated trips turned into canonical task rows.

The public snapshot has no travel data, so this is the only source: `build_tasks(None, seed,
options)` makes `train` and `test` splits whose scenarios are drawn from independent seeded
streams (`"<seed>:<split>:<index>"`), so the same seed always gives the same rows and changing the
size of one split never changes the other. Does not write files (that is `mua prep`).
"""

from __future__ import annotations

import random

from gyms.travel.scenarios import ASPECT_NAMES, make_scenario
from mua.errors import UsageError
from mua.gym.api import Task
from mua.gym.prep import check_options

DEFAULTS = {
    "num_train": 800,
    "num_test": 200,
    "num_aspects": 2,
    "prefs_per_aspect": 2,
    "num_options": 8,
}
VERSION = "2"

SYSTEM_PROMPT = """You are a travel agent helping a traveller plan a trip. The traveller's wishes are incomplete at first: ask about them, search the options, and recommend the best option for each travel aspect.

Use the tool `interact_with_env(choice, content)`:
- `search`: `content` names one aspect (flight, hotel, apartment, restaurant or rental car); returns its options with ids, attributes and prices.
- `action`: `content` is your message to the traveller (questions about their preferences).
- `answer`: `content` is the option id (e.g. H3) you recommend for an aspect. You get one recommendation per aspect.
- `finish`: end the conversation.
Without tool calling, write `[search] hotel`, `[action] your message`, `[answer] H3` or `[finish]`.

Preferences are often implicit, and the traveller may have several per aspect. The best option meets every preference at the lowest price."""


def _join(names: list[str]) -> str:
    names = [("an " if n[0] in "aeiou" else "a ") + n for n in names]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def opening_message(trip: dict) -> str:
    names = [ASPECT_NAMES[a["name"]] for a in trip["aspects"]]
    return (
        f"Hi! I'm going to {trip['destination']} for {trip['nights']} nights starting {trip['month']} "
        f"{trip['start_day']}. I need help choosing {_join(names)}. Let's start with the {names[0]}."
    )


def build_tasks(
    source: str | None, seed: int, options: dict | None = None
) -> dict[str, list[Task]]:
    """Train/test travel tasks; `options` may set the keys of DEFAULTS."""
    if source is not None:
        raise UsageError(
            "travel has no public dataset (its scenarios are generated); run `mua prep --gym travel` without --source"
        )
    opts = check_options(options or {}, DEFAULTS, "travel")
    if not 1 <= opts["num_aspects"] <= 4:
        raise UsageError(f"travel option num_aspects must be 1..4, got {opts['num_aspects']}")
    if not 1 <= opts["prefs_per_aspect"] <= 4:
        raise UsageError(
            f"travel option prefs_per_aspect must be 1..4, got {opts['prefs_per_aspect']}"
        )
    if opts["num_options"] < opts["prefs_per_aspect"] + 2:
        raise UsageError(
            f"travel option num_options must be at least prefs_per_aspect + 2 = {opts['prefs_per_aspect'] + 2}"
        )
    splits: dict[str, list[Task]] = {}
    for split, count in (("train", opts["num_train"]), ("test", opts["num_test"])):
        tasks = []
        for i in range(count):
            rng = random.Random(f"{seed}:{split}:{i}")
            trip = make_scenario(
                rng, opts["num_aspects"], opts["prefs_per_aspect"], opts["num_options"]
            )
            prompt = [
                {"role": "system", "content": SYSTEM_PROMPT},
                {"role": "user", "content": opening_message(trip)},
            ]
            tasks.append(
                Task(
                    task_id=f"travel-{split}-{i:05d}",
                    gym="travel",
                    split=split,
                    prompt=prompt,
                    payload=trip,
                    source=f"builtin:seed={seed}",
                    version=VERSION,
                )
            )
        splits[split] = tasks
    return splits
