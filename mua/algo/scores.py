"""Trajectory scores S_b (docs/algorithms.md §1): what the group baseline compares.

Ragged per-turn rewards in (one sequence per trajectory), a 1-D float tensor of length B out;
`sum`, `mean`, `r2g`, `outcome`, and 0 for a trajectory with no turns. Not here: advantages
(`advantages`), per-turn credit (`credit`).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from mua.algo._groups import as_float_list, check_choice
from mua.algo_names import SCORE_KINDS


def trajectory_score(rewards: torch.Tensor, kind: str, gamma: float = 1.0) -> float:
    """Score of one trajectory from its 1-D tensor of per-turn rewards."""
    num_turns = rewards.numel()
    if num_turns == 0:
        return 0.0
    if kind == "sum":
        return float(rewards.sum())
    if kind == "mean":
        return float(rewards.sum()) / num_turns
    if kind == "r2g":
        discounts = gamma ** torch.arange(num_turns, dtype=torch.float64)
        return float((discounts * rewards).sum())
    return float(rewards[-1])


def trajectory_scores(
    turn_rewards: Sequence[Sequence[float] | torch.Tensor], kind: str, gamma: float = 1.0
) -> torch.Tensor:
    """Scores S_b of every trajectory, shape [B] (default float dtype).

    `turn_rewards[b]` holds r_{b,1..T_b}; `gamma` only matters for `r2g`.
    """
    check_choice("score kind", kind, SCORE_KINDS)
    if not 0.0 <= gamma <= 1.0:
        raise ValueError(f"gamma must be in [0, 1], got {gamma}")
    scores = [trajectory_score(r, kind, gamma) for r in as_float_list(turn_rewards)]
    return torch.tensor(scores, dtype=torch.get_default_dtype())
