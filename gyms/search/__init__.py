"""Search gym: answer multi-hop questions with a search tool (offline BM25 over a local corpus).

Seeded by UserRL's SearchGym; its web search is replaced by an offline BM25 index over a passage
file or an HTTP retriever endpoint (`gym.options`). See README.md.
"""

from __future__ import annotations

import random

from gyms.common.actions import call_message
from gyms.common.episode import count_assistant_turns
from gyms.search.data import build_tasks
from gyms.search.env import SearchEnv
from mua.gym import GymContext, GymSpec


def make_env(ctx: GymContext) -> SearchEnv:
    return SearchEnv(ctx)


def expert(ctx: GymContext):
    """Issue the question's hop queries, then answer (built-in tasks carry both)."""

    async def policy(messages: list[dict], task) -> dict:
        hops = task.payload.get("hops") or [task.payload["question"]]
        turn = count_assistant_turns(messages)
        if turn < len(hops):
            return call_message("search", hops[turn])
        return call_message("answer", task.payload["answers"][0])

    return policy


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


GYM = GymSpec(
    name="search",
    description="Answer multi-hop questions using a search tool over a local corpus.",
    make_env=make_env,
    build_tasks=build_tasks,
    expert=expert,
    reward_components={"answer": 1.0},
    random_action=random_action,
    budgets={"max_turns": 12, "max_total_tokens": 8192, "max_new_tokens_per_turn": 256},
)
