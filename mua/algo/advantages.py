"""Group-relative trajectory advantages Â_b (docs/algorithms.md §2): GRPO, Dr. GRPO, RLOO, REINFORCE++.

Takes one score per trajectory and a group id per trajectory (the task it was rolled out from);
returns one advantage per trajectory. Spreading Â_b over tokens is `credit.token_advantages`;
critic-based advantages are `gae`. No filtering happens here (see `filters`).

Kinds (g = the trajectory's group, n its size):
- `grpo`:        Â_b = (S_b − mean_g S) / (std_g S + ε), std unbiased (n − 1 in the denominator).
- `drgrpo`:      Â_b = S_b − mean_g S (no std division; pair with `seq-mean-token-sum(-norm)`).
- `rloo`:        Â_b = S_b − mean of the other n − 1 scores of the group.
- `reinforce++`: centred by the group mean, then divided by (std over the whole batch of those
                 centred scores, unbiased) + ε.
A group of one has no baseline: mean 0 and std 1 (so `grpo` gives S_b / (1 + ε), the others S_b).
A batch of one trajectory under `reinforce++` likewise uses batch std 1.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import torch

from mua.algo._groups import check_choice, group_index
from mua.algo_names import ADVANTAGE_KINDS


def group_stats(scores: torch.Tensor, index: torch.Tensor, num_groups: int):
    """Per-trajectory (group size, group mean, group unbiased std), singleton groups -> (1, 0, 1)."""
    scores = scores.to(torch.float64)
    counts = torch.zeros(num_groups, dtype=torch.float64).index_add_(
        0, index, torch.ones_like(scores)
    )
    sums = torch.zeros(num_groups, dtype=torch.float64).index_add_(0, index, scores)
    means = sums / counts
    sq_dev = (scores - means[index]) ** 2
    sq_sums = torch.zeros(num_groups, dtype=torch.float64).index_add_(0, index, sq_dev)
    stds = torch.sqrt(sq_sums / (counts - 1).clamp(min=1))
    single = counts == 1
    means = torch.where(single, torch.zeros_like(means), means)
    stds = torch.where(single, torch.ones_like(stds), stds)
    return counts[index], means[index], stds[index]


def group_advantages(
    scores: torch.Tensor | Sequence[float],
    group_ids: torch.Tensor | Sequence[Hashable],
    kind: str = "grpo",
    eps: float = 1e-6,
) -> torch.Tensor:
    """Advantage Â_b of every trajectory, shape [B], same dtype as `scores` (float).

    `group_ids[b]` may be any hashable (task uid string, int); equal ids form one group.
    """
    check_choice("advantage kind", kind, ADVANTAGE_KINDS)
    scores = torch.as_tensor(scores, dtype=torch.get_default_dtype()).reshape(-1)
    out_dtype = scores.dtype
    index, num_groups = group_index(group_ids, scores.numel())
    if scores.numel() == 0:
        return scores.clone()
    counts, means, stds = group_stats(scores, index, num_groups)
    s = scores.to(torch.float64)
    if kind == "grpo":
        adv = (s - means) / (stds + eps)
    elif kind == "drgrpo":
        adv = s - means
    elif kind == "rloo":
        # mean of the others = (n·mean − S_b)/(n − 1); a group of one keeps baseline 0.
        others = (counts * means - s) / (counts - 1).clamp(min=1)
        adv = torch.where(counts > 1, s - others, s)
    else:
        centred = s - means
        batch_std = centred.std() if centred.numel() > 1 else torch.tensor(1.0, dtype=torch.float64)
        adv = centred / (batch_std + eps)
    return adv.to(out_dtype)
