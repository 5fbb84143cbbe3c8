"""Trajectory filters (docs/algorithms.md §7): DAPO dynamic sampling and termination-aware masking.

Both return per-trajectory boolean/float tensors. `termination_mask` always masks the failures of
the environment (`user_failure`, `timeout`, `env_error`, `engine_error`, `drift`), masks
`length` and `max_turns` only with `mask_truncated`, and keeps every other reason.
Not here: dropping rows, re-sampling until the batch is full, counting what was dropped.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import torch

from mua.algo._groups import group_index, valid_flags

FAILURE_REASONS = frozenset({"user_failure", "timeout", "env_error", "engine_error", "drift"})
TRUNCATION_REASONS = frozenset({"length", "max_turns"})


def zero_variance_groups(
    scores: torch.Tensor | Sequence[float],
    group_ids: torch.Tensor | Sequence[Hashable],
    tol: float = 1e-9,
    valid: torch.Tensor | Sequence[bool] | None = None,
) -> torch.Tensor:
    """Bool [B]: True where the trajectory's group has all-equal scores (max − min ≤ tol).

    Those groups carry no GRPO signal; DAPO's dynamic sampling drops them (`keep = ~result`).
    Only valid members are compared (`valid[b]` False: masked, see `termination_mask`; None: all
    valid), so a masked score never makes a group look informative. A group with fewer than 2
    valid members (a group of one among them) counts as zero-variance.
    """
    scores = torch.as_tensor(scores, dtype=torch.float64).reshape(-1)
    index, num_groups = group_index(group_ids, scores.numel())
    if scores.numel() == 0:
        return torch.zeros(0, dtype=torch.bool)
    ok = valid_flags(valid, scores.numel())
    high = torch.full((num_groups,), -torch.inf, dtype=torch.float64).scatter_reduce(
        0, index, torch.where(ok, scores, -torch.inf), "amax"
    )
    low = torch.full((num_groups,), torch.inf, dtype=torch.float64).scatter_reduce(
        0, index, torch.where(ok, scores, torch.inf), "amin"
    )
    counts = torch.zeros(num_groups, dtype=torch.float64).index_add_(0, index, ok.double())
    return (((high - low) <= tol) | (counts < 2))[index]


def termination_mask(reasons: Sequence[str], mask_truncated: bool = False) -> torch.Tensor:
    """Float [B]: 1 for trajectories that enter the loss, 0 for excluded ones (see module doc)."""
    excluded = FAILURE_REASONS | TRUNCATION_REASONS if mask_truncated else FAILURE_REASONS
    return torch.tensor(
        [0.0 if r in excluded else 1.0 for r in reasons], dtype=torch.get_default_dtype()
    )
