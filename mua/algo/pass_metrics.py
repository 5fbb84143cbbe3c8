"""Evaluation metrics (docs/algorithms.md §10): pass@k, tau-bench pass^k, and their task averages.

For a task with c successes out of n trials:
- pass@k = 1 − C(n − c, k) / C(n, k): probability that at least one of k draws succeeds;
- pass^k = C(c, k) / C(n, k): probability that all k draws succeed (tau-bench).
Exact integer binomials (math.comb), returned as floats. Aggregating per gym (success rate, turns,
tokens, termination reasons) is the evaluation runner's job.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from math import comb


def _check(n: int, c: int, k: int) -> None:
    if not (0 <= c <= n):
        raise ValueError(f"successes c={c} must be between 0 and trials n={n}")
    if not (1 <= k <= n):
        raise ValueError(f"k={k} must be between 1 and the number of trials n={n}")


def pass_at_k(n: int, c: int, k: int) -> float:
    """1 − C(n − c, k) / C(n, k)."""
    _check(n, c, k)
    return 1.0 - comb(n - c, k) / comb(n, k)


def pass_hat_k(n: int, c: int, k: int) -> float:
    """C(c, k) / C(n, k) (tau-bench pass^k)."""
    _check(n, c, k)
    return comb(c, k) / comb(n, k)


def mean_pass_at_k(trials: Iterable[tuple[int, int]], k: int) -> float:
    """Average of pass@k over tasks given as (n, c) pairs."""
    values = [pass_at_k(n, c, k) for n, c in trials]
    if not values:
        raise ValueError("no tasks to average pass@k over")
    return sum(values) / len(values)


def mean_pass_hat_k(trials: Iterable[tuple[int, int]], k: int) -> float:
    """Average of pass^k over tasks given as (n, c) pairs."""
    values = [pass_hat_k(n, c, k) for n, c in trials]
    if not values:
        raise ValueError("no tasks to average pass^k over")
    return sum(values) / len(values)


def success_counts(task_ids: Sequence[str], successes: Sequence[bool]) -> list[tuple[int, int]]:
    """Group per-trial outcomes by task into (n, c) pairs, in first-seen task order."""
    if len(task_ids) != len(successes):
        raise ValueError("give one success flag per trial")
    trials: Counter[str] = Counter()
    wins: Counter[str] = Counter()
    for task_id, ok in zip(task_ids, successes, strict=True):
        trials[task_id] += 1
        wins[task_id] += int(bool(ok))
    return [(trials[t], wins[t]) for t in trials]
