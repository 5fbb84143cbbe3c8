"""Gradient accumulation over packed micro-batches, in lock-step across ranks.

Every rank must run the same number of forward/backward passes (each one runs FSDP
collectives), so a rank with fewer micro-batches runs zero-loss passes on a two-token dummy row.
The caller's `loss_fn(mb, out)` returns an already normalised partial loss (global counts,
times the world size because FSDP averages gradients over ranks) and a dict of float stats;
`out` is the logits [R, V] of the row, or, when the caller passes masks, the scored tokens'
(log-probs [T], entropies [T]) computed through the LM head in chunks (`mua.train.head_scores`),
so no micro-batch ever holds logits for all its scored tokens.
Does not step the optimizer.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from mua.dist import all_reduce_max
from mua.train.head_scores import scored_forward
from mua.train.packing import MicroBatch, pack, packed_logits, plan_micro_batches
from mua.train.varlen import shares_prefixes

LossFn = Callable[[MicroBatch, object], tuple[torch.Tensor, dict[str, float]]]


def accumulate(
    model,
    sequences: list[list[int]],
    token_budget: int,
    device,
    loss_fn: LossFn,
    backward: bool = True,
    masks: list[list[int]] | None = None,
    share_prefixes: bool = False,
    temperature: float = 1.0,
    entropy_grad: bool = False,
) -> list[dict[str, float]]:
    """Forward (and backward) every micro-batch of `sequences`; returns per-micro-batch stats.
    With `masks`, `loss_fn` gets the marked tokens' (log-probs, entropies) at `temperature`
    (the entropy with gradients only with `entropy_grad`), and with `share_prefixes` a prompt
    shared by consecutive sequences is fed once where the model's attention allows it
    (`packing.pack`)."""
    share = share_prefixes and shares_prefixes(model)
    groups = plan_micro_batches([len(s) for s in sequences], token_budget)
    num_passes = int(all_reduce_max([len(groups)])[0])
    stats = []
    for k in range(num_passes):
        if k < len(groups):
            mb = pack(sequences, groups[k], device, masks, share)
            if masks is None:
                out = packed_logits(model, mb)
            else:
                out = scored_forward(model, mb, temperature, entropy_grad)
            loss, st = loss_fn(mb, out)
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
    temperature: float = 1.0,
) -> list:
    """Run `per_mb(mb, out)` (returning one value per sequence) and return values in input order.
    `out`, `masks`, `share_prefixes` and `temperature` as in `accumulate`."""
    share = share_prefixes and shares_prefixes(model)
    out: list = [None] * len(sequences)
    groups = plan_micro_batches([len(s) for s in sequences], token_budget)
    num_passes = int(all_reduce_max([len(groups)])[0])
    for k in range(num_passes):
        if k < len(groups):
            mb = pack(sequences, groups[k], device, masks, share)
            scores = (
                packed_logits(model, mb)
                if masks is None
                else scored_forward(model, mb, temperature)
            )
            values = per_mb(mb, scores)
            for i, v in zip(mb.indices, values):
                out[i] = v
        else:
            packed_logits(model, pack([[0, 0]], [0], device))
    if hasattr(model, "reshard"):  # FSDP2 keeps the root unsharded after a forward without backward
        model.reshard()
    return out
