"""B2's reference point: what an ideal asynchronous engine would score on the same workload.

An event simulation, no model and no HTTP. Each conversation alternates a user wait (log-normal
with the fake user server's mean and sigma, the user speaking first) and an agent turn of a given
number of tokens. The simulated engine has no runner overhead: whenever rows are ready it decodes
one token for every one of them in a step that costs `fixed_s + per_row_s * rows`, the cost model
fitted to the real engine's measured step times at 1 row and at a full batch. The turn-synchronous
loop and generation alone get the same cost model, so the three times differ only by scheduling.

If the ideal engine misses a bar, no runner on that engine and machine can meet it: the bar then
asks for a different cost model (a smaller fixed cost per step, or more work per row), not for
better scheduling. Does not measure anything itself; B2 passes in its measured step costs.
"""

from __future__ import annotations

import math
import random
import statistics
from dataclasses import dataclass


@dataclass(frozen=True)
class Workload:
    conversations: int
    turns: int  # agent turns; each follows one user message (the first opens the conversation)
    tokens_per_turn: int
    latency_mean_s: float
    latency_sigma: float


def fit_step_cost(step_s_one_row: float, step_s_full: float, full_rows: int) -> tuple[float, float]:
    """(fixed seconds per step, seconds per row) through the two measured points, per-row >= 0."""
    per_row = max(0.0, (step_s_full - step_s_one_row) / max(1, full_rows - 1))
    return step_s_one_row - per_row, per_row


def ideal_scores(
    work: Workload, fixed_s: float, per_row_s: float, seeds: int = 41
) -> dict[str, float]:
    """Median over `seeds` draws of the ideal engine's ratio to generation alone and its speedup
    over the turn-synchronous loop, with the three simulated times."""
    runs = [_simulate(work, fixed_s, per_row_s, random.Random(seed)) for seed in range(seeds)]
    generation = work.turns * work.tokens_per_turn * (fixed_s + per_row_s * work.conversations)
    asynchronous = statistics.median(r[0] for r in runs)
    turn_sync = statistics.median(r[1] for r in runs)
    return {
        "ratio_vs_generation_only": asynchronous / generation,
        "speedup_vs_turn_sync": turn_sync / asynchronous,
        "async_seconds": asynchronous,
        "turn_sync_seconds": turn_sync,
        "generation_only_seconds": generation,
    }


def _simulate(
    work: Workload, fixed_s: float, per_row_s: float, rng: random.Random
) -> tuple[float, float]:
    mu = math.log(work.latency_mean_s) - work.latency_sigma**2 / 2

    def user_wait() -> float:
        return rng.lognormvariate(mu, work.latency_sigma)

    n = work.conversations
    ready_at = [user_wait() for _ in range(n)]  # the user's opening message
    tokens_left = [work.tokens_per_turn] * n
    turns_done = [0] * n
    live = set(range(n))
    now = 0.0
    while live:
        ready = [i for i in live if ready_at[i] <= now]
        if not ready:
            now = min(ready_at[i] for i in live)
            continue
        now += fixed_s + per_row_s * len(ready)
        for i in ready:
            tokens_left[i] -= 1
            if tokens_left[i]:
                continue
            turns_done[i] += 1
            if turns_done[i] == work.turns:
                live.discard(i)
            else:
                tokens_left[i] = work.tokens_per_turn
                ready_at[i] = now + user_wait()
    turn_step_s = fixed_s + per_row_s * n
    turn_sync = sum(
        max(user_wait() for _ in range(n)) + work.tokens_per_turn * turn_step_s
        for _ in range(work.turns)
    )
    return now, turn_sync
