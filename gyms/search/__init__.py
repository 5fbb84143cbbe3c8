"""Answer multi-hop questions using a search tool over a local corpus.

The search gym, seeded by UserRL's SearchGym; its web search is replaced by an offline BM25 index
over a passage file or an HTTP retriever endpoint (`gym.options`). See README.md.
"""

from __future__ import annotations

import random

from gyms.common.actions import call_message
from gyms.common.spec import interact_gym
from gyms.search.data import build_tasks
from gyms.search.env import SearchEnv
from mua.gym import Task


def next_query(turn: int, task: Task) -> dict:
    """Issue the question's hop queries, then answer (built-in tasks carry both)."""
    hops = task.payload.get("hops") or [task.payload["question"]]
    if turn < len(hops):
        return call_message("search", hops[turn])
    return call_message("answer", task.payload["answers"][0])


_QUERY_WORDS = (
    "who where when capital river theatre opera comet town founded born built year tower".split()
)


def random_action(rng: random.Random) -> str:
    roll = rng.random()
    if roll < 0.6:
        return "[search] " + " ".join(rng.choice(_QUERY_WORDS) for _ in range(rng.randint(1, 4)))
    if roll < 0.9:
        return f"[answer] {rng.choice(['1850', 'unknown', 'Paris', '42', 'yes'])}"
    return rng.choice(["[finish]", "[action] hello", "I don't know"])


GYM = interact_gym(
    __doc__, SearchEnv, build_tasks, next_query, random_action, max_total_tokens=8192
)
