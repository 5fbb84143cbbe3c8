"""Gradient accumulation over packed micro-batches, in lock-step across ranks.

Every rank must run the same number of forward/backward passes (each one runs FSDP
collectives), so a rank with fewer micro-batches runs zero-loss passes on a two-token dummy row.
The caller's `loss_fn(mb, logits)` returns an already normalised partial loss (global counts,
times the world size because FSDP averages gradients over ranks) and a dict of float stats.
Does not step the optimizer.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from mua.dist import all_reduce_max
from mua.train.packing import MicroBatch, pack, packed_logits, plan_micro_batches
from mua.train.varlen import shares_prefixes

LossFn = Callable[[MicroBatch, torch.Tensor], tuple[torch.Tensor, dict[str, float]]]


def accumulate(
    model,
    sequences: list[list[int]],
    token_budget: int,
    device,
    loss_fn: LossFn,
    backward: bool = True,
    masks: list[list[int]] | None = None,
    share_prefixes: bool = False,
) -> list[dict[str, float]]:
    """Forward (and backward) every micro-batch of `sequences`; returns per-micro-batch stats.
    With `masks`, logits are computed only for the tokens they mark, and with `share_prefixes`
    a prompt shared by consecutive sequences is fed once where the model's attention allows it
    (`packing.pack`)."""
    share = share_prefixes and shares_prefixes(model)
    groups = plan_micro_batches([len(s) for s in sequences], token_budget)
    num_passes = int(all_reduce_max([len(groups)])[0])
    stats = []
    for k in range(num_passes):
        if k < len(groups):
            mb = pack(sequences, groups[k], device, masks, share)
            logits = packed_logits(model, mb)
            loss, st = loss_fn(mb, logits)
            stats.append(st)
        else:
            mb = pack([[0, 0]], [0], device)
            loss = packed_logits(model, mb).sum() * 0.0
        if backward:
            loss.backward()
    return stats


@torch.no_grad()
def forward_only(
    model,
    sequences: list[list[int]],
    token_budget: int,
    device,
    per_mb: Callable[[MicroBatch, torch.Tensor], list],
    masks: list[list[int]] | None = None,
    share_prefixes: bool = False,
) -> list:
    """Run `per_mb(mb, logits)` (returning one value per sequence) and return values in input order.
    `masks` and `share_prefixes` as in `accumulate`."""
    share = share_prefixes and shares_prefixes(model)
    out: list = [None] * len(sequences)
    groups = plan_micro_batches([len(s) for s in sequences], token_budget)
    num_passes = int(all_reduce_max([len(groups)])[0])
    for k in range(num_passes):
        if k < len(groups):
            mb = pack(sequences, groups[k], device, masks, share)
            values = per_mb(mb, packed_logits(model, mb))
            for i, v in zip(mb.indices, values):
                out[i] = v
        else:
            packed_logits(model, pack([[0, 0]], [0], device))
    return out
