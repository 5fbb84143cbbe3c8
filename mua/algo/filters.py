"""Trajectory filters (docs/algorithms.md §7): DAPO dynamic sampling and termination-aware masking.

Both return per-trajectory boolean/float tensors; dropping rows, re-sampling until the batch is
full and counting what was dropped are the trainer's job.

Termination reasons (set by the rollout runner) and how `termination_mask` treats them:
- always masked (a failure of the environment, not of the policy): `user_failure`, `timeout`,
  `env_error` (the gym raised), `engine_error`, `drift` (the re-rendered conversation did not
  match the sampled tokens);
- masked only with `mask_truncated`: `length` (token budget hit), `max_turns`;
- every other reason (`done`, `stop`, `parse_failure`, ...) is kept: those endings are the
  policy's own doing and should be trained on.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import torch

from mua.algo._groups import group_index

FAILURE_REASONS = frozenset({"user_failure", "timeout", "env_error", "engine_error", "drift"})
TRUNCATION_REASONS = frozenset({"length", "max_turns"})


def zero_variance_groups(
    scores: torch.Tensor | Sequence[float],
    group_ids: torch.Tensor | Sequence[Hashable],
    tol: float = 1e-9,
) -> torch.Tensor:
    """Bool [B]: True where the trajectory's group has all-equal scores (max − min ≤ tol).

    Those groups carry no GRPO signal; DAPO's dynamic sampling drops them (`keep = ~result`).
    A group of one counts as zero-variance.
    """
    scores = torch.as_tensor(scores, dtype=torch.float64).reshape(-1)
    index, num_groups = group_index(group_ids, scores.numel())
    if scores.numel() == 0:
        return torch.zeros(0, dtype=torch.bool)
    high = torch.full((num_groups,), -torch.inf, dtype=torch.float64).scatter_reduce(
        0, index, scores, "amax"
    )
    low = torch.full((num_groups,), torch.inf, dtype=torch.float64).scatter_reduce(
        0, index, scores, "amin"
    )
    return ((high - low) <= tol)[index]


def termination_mask(reasons: Sequence[str], mask_truncated: bool = False) -> torch.Tensor:
    """Float [B]: 1 for trajectories that enter the loss, 0 for excluded ones (see module doc)."""
    excluded = FAILURE_REASONS | TRUNCATION_REASONS if mask_truncated else FAILURE_REASONS
    return torch.tensor(
        [0.0 if r in excluded else 1.0 for r in reasons], dtype=torch.get_default_dtype()
    )
