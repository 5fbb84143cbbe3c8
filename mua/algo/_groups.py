"""Small shared helpers: turning group ids into dense indices and checking option names.

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
