"""Group-relative trajectory advantages Â_b (docs/algorithms.md §2): GRPO, Dr. GRPO, RLOO, REINFORCE++.

One score and one group id per trajectory in, one advantage per trajectory out. Invalid
trajectories (`valid` False) get 0 and enter no statistic. Not here: spreading Â_b over tokens
(`credit.token_advantages`), critic-based advantages (`gae`), filtering (`filters`).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import torch

from mua.algo._groups import check_choice, group_index, usable_mask
from mua.algo_names import ADVANTAGE_KINDS


def group_stats(
    scores: torch.Tensor, index: torch.Tensor, num_groups: int, valid: torch.Tensor | None = None
):
    """Per-trajectory (group size, group mean, group unbiased std) over the group's valid members
    (all when `valid` is None); a group with fewer than 2 valid members has mean 0 and std 1."""
    scores = scores.to(torch.float64)
    valid = torch.ones_like(scores, dtype=torch.bool) if valid is None else valid
    zero = torch.zeros((), dtype=torch.float64)
    counts = torch.zeros(num_groups, dtype=torch.float64).index_add_(0, index, valid.double())
    sums = torch.zeros(num_groups, dtype=torch.float64).index_add_(
        0, index, torch.where(valid, scores, zero)
    )
    means = sums / counts.clamp(min=1)
    sq_dev = torch.where(valid, (scores - means[index]) ** 2, zero)
    sq_sums = torch.zeros(num_groups, dtype=torch.float64).index_add_(0, index, sq_dev)
    stds = torch.sqrt(sq_sums / (counts - 1).clamp(min=1))
    single = counts <= 1
    means = torch.where(single, torch.zeros_like(means), means)
    stds = torch.where(single, torch.ones_like(stds), stds)
    return counts[index], means[index], stds[index]


def group_advantages(
    scores: torch.Tensor | Sequence[float],
    group_ids: torch.Tensor | Sequence[Hashable],
    kind: str = "grpo",
    eps: float = 1e-6,
    valid: torch.Tensor | Sequence[bool] | None = None,
) -> torch.Tensor:
    """Advantage Â_b of every trajectory, shape [B], same dtype as `scores` (float).

    `group_ids[b]` may be any hashable (task uid string, int); equal ids form one group.
    `valid[b]` False leaves trajectory b out of every statistic (module doc); None: all valid.
    """
    check_choice("advantage kind", kind, ADVANTAGE_KINDS)
    scores = torch.as_tensor(scores, dtype=torch.get_default_dtype()).reshape(-1)
    out_dtype = scores.dtype
    index, num_groups = group_index(group_ids, scores.numel())
    if scores.numel() == 0:
        return scores.clone()
    usable = usable_mask(valid, index, num_groups)
    counts, means, stds = group_stats(scores, index, num_groups, usable)
    s = torch.where(usable, scores.to(torch.float64), torch.zeros((), dtype=torch.float64))
    if kind == "grpo":
        adv = (s - means) / (stds + eps)
    elif kind == "drgrpo":
        adv = s - means
    elif kind == "rloo":
        # mean of the others = (n·mean − S_b)/(n − 1); a group of one keeps baseline 0.
        others = (counts * means - s) / (counts - 1).clamp(min=1)
        adv = torch.where(counts > 1, s - others, s)
    else:
        centred = (s - means)[usable]
        batch_std = centred.std() if centred.numel() > 1 else torch.tensor(1.0, dtype=torch.float64)
        adv = (s - means) / (batch_std + eps)
    return torch.where(usable, adv, torch.zeros_like(adv)).to(out_dtype)
