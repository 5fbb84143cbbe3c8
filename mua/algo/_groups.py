"""Small shared helpers: group ids as dense indices, which members a group baseline may use,
and checking option names.

Internal to `mua.algo`; nothing here is part of the public API.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import torch


def group_index(
    group_ids: torch.Tensor | Sequence[Hashable], size: int
) -> tuple[torch.Tensor, int]:
    """Map arbitrary group ids (ints, strings, uuids) to a dense LongTensor 0..G-1 in first-seen order."""
    ids = group_ids.tolist() if isinstance(group_ids, torch.Tensor) else list(group_ids)
    if len(ids) != size:
        raise ValueError(
            f"got {len(ids)} group ids for {size} trajectories; give one id per trajectory"
        )
    dense: dict[Hashable, int] = {}
    index = [dense.setdefault(gid, len(dense)) for gid in ids]
    return torch.tensor(index, dtype=torch.long), len(dense)


def valid_flags(valid: torch.Tensor | Sequence[bool] | None, size: int) -> torch.Tensor:
    """Bool [size] from per-trajectory valid flags (None: every trajectory is valid)."""
    if valid is None:
        return torch.ones(size, dtype=torch.bool)
    flags = torch.as_tensor(valid).to(torch.bool).reshape(-1)
    if flags.numel() != size:
        raise ValueError(
            f"got {flags.numel()} valid flags for {size} trajectories; give one per trajectory"
        )
    return flags


def usable_mask(
    valid: torch.Tensor | Sequence[bool] | None, index: torch.Tensor, num_groups: int
) -> torch.Tensor:
    """Bool [B]: valid and not in a group that masking left with fewer than 2 valid members
    (a group of one by design stays usable)."""
    flags = valid_flags(valid, index.numel())
    ones = torch.ones(index.numel(), dtype=torch.float64)
    members = torch.zeros(num_groups, dtype=torch.float64).index_add_(0, index, ones)
    kept = torch.zeros(num_groups, dtype=torch.float64).index_add_(0, index, flags.double())
    orphaned = (members >= 2) & (kept < 2)
    return flags & ~orphaned[index]


def check_choice(name: str, value: str, options: Sequence[str]) -> None:
    """Raise one readable ValueError when `value` is not one of `options`."""
    if value not in options:
        raise ValueError(f"unknown {name} {value!r}; choose one of: {', '.join(options)}")


def as_float_list(turn_rewards: Sequence[Sequence[float] | torch.Tensor]) -> list[torch.Tensor]:
    """Per-trajectory turn rewards as a list of 1-D float64 tensors (ragged, T_b may differ)."""
    out = []
    for rewards in turn_rewards:
        t = torch.as_tensor(rewards, dtype=torch.float64).reshape(-1)
        out.append(t)
    return out
