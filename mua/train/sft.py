"""One SFT optimizer step: negative log-likelihood of assistant tokens, token-mean over the batch.

The batch is global (the same list on every rank); each rank trains on its strided share,
and the token count is summed over ranks, so the step does not depend on the number of ranks
or on the micro-batch token budget. A mixture of experts may add its routers' load-balancing loss
(`router_aux_coef`, logged as `moe/aux_loss`). Does not load data or save checkpoints.
"""

from __future__ import annotations

import time

from mua.distributed import all_reduce_sum
from mua.distributed.fsdp import clip_grad_norm
from mua.train.data import SFTSample, rank_slice
from mua.train.guards import check_finite
from mua.train.packed_batch import concat_per_token, first_token_mask
from mua.train.packed_forward import accumulate


def sft_step(
    model,
    optimizer,
    scheduler,
    batch: list[SFTSample],
    *,
    rank: int,
    world_size: int,
    token_budget: int,
    grad_clip: float | None,
    device,
    router_aux_coef: float = 0.0,
) -> dict[str, float]:
    start = time.perf_counter()
    mine = rank_slice(batch, rank, world_size)
    seqs = [s.token_ids for s in mine]
    masks = [s.loss_mask for s in mine]
    local_tokens = sum(sum(m[1:]) for m in masks)
    global_tokens = float(all_reduce_sum([local_tokens])[0])

    def loss_fn(mb, scores):
        mask = concat_per_token(masks, mb.indices, device=device) * first_token_mask(
            mb.lengths, device
        )
        logp = scores[0]
        nll_sum = -(logp * mask).sum()
        return nll_sum * world_size / max(global_tokens, 1.0), {"nll_sum": float(nll_sum.detach())}

    optimizer.zero_grad(set_to_none=True)
    stats = accumulate(
        model, seqs, token_budget, device, loss_fn, masks=masks, router_aux_coef=router_aux_coef
    )
    grad_norm = clip_grad_norm(model, grad_clip)
    check_finite(sum(s["nll_sum"] for s in stats), grad_norm)
    lr = optimizer.param_groups[0]["lr"]
    optimizer.step()
    scheduler.step()
    loss = float(all_reduce_sum([sum(s["nll_sum"] for s in stats)])[0]) / max(global_tokens, 1.0)
    seconds = time.perf_counter() - start
    total_tokens = float(all_reduce_sum([sum(len(s) for s in seqs)])[0])
    extra = {}
    if router_aux_coef:  # a mixture of experts' load-balancing loss (token-weighted mean)
        extra["moe/aux_loss"] = float(
            all_reduce_sum([sum(s.get("moe/aux_loss", 0.0) for s in stats)])[0]
        )
    return {
        **extra,
        "loss": loss,
        "grad_norm": grad_norm,
        "lr": lr,
        "tokens/trained": global_tokens,
        "tokens/total": total_tokens,
        "time/update_s": seconds,
        "tokens_per_s": total_tokens / max(seconds, 1e-9),
    }


def sft_steps_total(num_samples: int, batch_size: int, epochs: int, cap: int) -> int:
    per_epoch = max(1, -(-num_samples // batch_size))
    return min(cap, per_epoch * epochs)
