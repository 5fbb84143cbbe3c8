"""Losses (docs/algorithms.md §4-§5): policy losses (PPO-clip, GSPO, GSPO-token, CISPO), the
clipped value loss, entropy, aggregation.

`policy_loss` and `value_loss` return per-token losses (0 outside the loss mask) plus detached
statistics; `aggregate` reduces them to the scalar to back-propagate, dividing by the global
counts of `loss_normalizers` (summed over micro-batches and ranks) so partial losses add up to the
mini-batch loss. Rows are sequences, or `seq_index` (−1 for padding) marks packed ones.
Not here: optimizers, models, process groups.
"""

from __future__ import annotations

import torch

from mua.algo._groups import check_choice
from mua.algo_names import AGGREGATIONS, POLICY_LOSS_KINDS


def _masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    count = mask.sum()
    return (x * mask).sum() / count.clamp(min=1)


def policy_loss(
    logp: torch.Tensor,
    logp_old: torch.Tensor,
    advantages: torch.Tensor,
    loss_mask: torch.Tensor,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    dual_clip: float | None = None,
    entropy: torch.Tensor | None = None,
    entropy_coef: float = 0.0,
    kl: torch.Tensor | None = None,
    kl_coef: float = 0.0,
    is_weights: torch.Tensor | None = None,
    kind: str = "ppo-clip",
    seq_index: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Per-token policy loss of `kind` (+ optional dual clip, entropy bonus, KL in the loss).

    `ppo-clip`: ratio = exp(logp − logp_old); l_i = −min(ratio·A, clip(ratio, 1−clip_low,
    1+clip_high)·A). `gspo`: the same around the sequence ratio exp(mean_seq(logp − logp_old))
    with the sequence's mean advantage, the sequence's loss on each of its tokens; `gspo-token`:
    ratio sg(s)·π/sg(π) with the token's advantage; `cispo`: l_i = −sg(clip(ratio))·A·logp
    (docs/algorithms.md §5). The sequence kinds read `seq_index` (or [B, L] rows, see `aggregate`).
    With `dual_clip` = c > 1 (ppo-clip only), tokens with A < 0 have l_i capped at −c·A. With
    `is_weights` w (off-policy corrections, `mua.algo.offpolicy`), l_i = w_i·l_i (w is a
    constant). Then l_i −= entropy_coef · entropy_i and l_i += kl_coef · kl_i. Returns (losses,
    stats) where the stats are masked means over policy tokens: `clip_frac` (the clip acted),
    `dual_clip_frac`, `approx_kl` (mean of logp_old − logp), `ratio_mean`, `pg_loss`, plus
    `entropy`/`kl` when given, and `tokens` (the policy-token count, to weight stats across
    micro-batches).
    """
    check_choice("policy loss kind", kind, POLICY_LOSS_KINDS)
    if dual_clip is not None and dual_clip <= 1.0:
        raise ValueError(f"dual_clip must be > 1, got {dual_clip}")
    if dual_clip is not None and kind != "ppo-clip":
        raise ValueError(f"dual_clip applies to the ppo-clip loss only, not to {kind}")
    mask = loss_mask.to(logp.dtype)
    advantages = advantages.detach().to(logp.dtype)
    log_ratio = logp - logp_old.detach()
    if kind == "cispo":
        pg, clip_active = _cispo(logp, log_ratio, advantages, clip_low, clip_high)
        dual_active = torch.zeros_like(clip_active)
    else:
        surrogate_log_ratio, advantages = _surrogate_inputs(
            kind, logp, log_ratio, advantages, mask, seq_index
        )
        pg, clip_active, dual_active = _clipped_surrogate(
            surrogate_log_ratio, advantages, clip_low, clip_high, dual_clip
        )
    if is_weights is not None:
        pg = pg * is_weights.detach().to(pg.dtype)
    stats = {
        "pg_loss": _masked_mean(pg.detach(), mask),
        "clip_frac": _masked_mean(clip_active.to(mask.dtype), mask),
        "dual_clip_frac": _masked_mean(dual_active.to(mask.dtype), mask),
        "approx_kl": _masked_mean(-log_ratio.detach(), mask),
        "ratio_mean": _masked_mean(torch.exp(log_ratio.detach()), mask),
        "tokens": mask.sum().detach(),
    }
    losses = pg
    if entropy is not None:
        losses = losses - entropy_coef * entropy
        stats["entropy"] = _masked_mean(entropy.detach(), mask)
    if kl is not None:
        losses = losses + kl_coef * kl
        stats["kl"] = _masked_mean(kl.detach(), mask)
    return losses * mask, stats


def _surrogate_inputs(
    kind: str,
    logp: torch.Tensor,
    log_ratio: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    seq_index: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(log-ratio, advantages) the clipped surrogate of `kind` reads, per token: the token's own
    (ppo-clip), the sequence's (gspo), or the sequence ratio with the token's gradient and
    advantage (gspo-token: log of sg(s)·π/sg(π))."""
    if kind == "ppo-clip":
        return log_ratio, advantages
    seq_log_ratio = sequence_mean(log_ratio, mask, seq_index)
    if kind == "gspo":
        return seq_log_ratio, sequence_mean(advantages, mask, seq_index)
    return seq_log_ratio.detach() + logp - logp.detach(), advantages


def _clipped_surrogate(
    log_ratio: torch.Tensor,
    advantages: torch.Tensor,
    clip_low: float,
    clip_high: float,
    dual_clip: float | None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """−min(r·A, clip(r)·A) per token (dual clip optional): (losses, clipped term chosen, dual
    clip active)."""
    ratio = torch.exp(log_ratio)
    unclipped = -advantages * ratio
    clipped = -advantages * ratio.clamp(1.0 - clip_low, 1.0 + clip_high)
    pg = torch.maximum(unclipped, clipped)
    dual_active = torch.zeros_like(pg, dtype=torch.bool)
    if dual_clip is not None:
        cap = -advantages * dual_clip
        dual_active = (advantages < 0) & (pg > cap)
        pg = torch.where(advantages < 0, torch.minimum(pg, cap), pg)
    return pg, clipped > unclipped, dual_active


def _cispo(
    logp: torch.Tensor,
    log_ratio: torch.Tensor,
    advantages: torch.Tensor,
    clip_low: float,
    clip_high: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """CISPO's −sg(clip(r, 1−clip_low, 1+clip_high))·A·logp: (losses, the ratio was clipped)."""
    ratio = torch.exp(log_ratio.detach())
    weight = ratio.clamp(1.0 - clip_low, 1.0 + clip_high)
    return -weight * advantages * logp, weight != ratio


def sequence_mean(
    values: torch.Tensor, loss_mask: torch.Tensor, seq_index: torch.Tensor | None = None
) -> torch.Tensor:
    """Each token's sequence mean of `values` over the sequence's policy tokens (0 for a sequence
    without any, and for padding); gradients flow to every token of the sequence."""
    mask = loss_mask.to(values.dtype)
    ids = _seq_ids(mask, seq_index)
    per_seq = _per_sequence(_on_mask(values, mask), ids) / _per_sequence(mask, ids).clamp(min=1)
    return _per_token(per_seq, ids)


def sequence_sum(
    values: torch.Tensor, loss_mask: torch.Tensor, seq_index: torch.Tensor | None = None
) -> torch.Tensor:
    """Each token's sequence sum of `values` over the sequence's policy tokens (0 for padding)."""
    mask = loss_mask.to(values.dtype)
    ids = _seq_ids(mask, seq_index)
    return _per_token(_per_sequence(_on_mask(values, mask), ids), ids)


def _on_mask(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """`values` on policy tokens, 0 elsewhere (whatever they hold there, inf or nan included)."""
    return torch.where(mask > 0, values, torch.zeros_like(values))


def _per_token(per_seq: torch.Tensor, seq_ids: torch.Tensor) -> torch.Tensor:
    """Spread one value per sequence onto the sequence's tokens (0 where the id is < 0)."""
    if per_seq.numel() == 0:
        return torch.zeros(seq_ids.shape, dtype=per_seq.dtype, device=per_seq.device)
    spread = per_seq[seq_ids.clamp(min=0)]
    return torch.where(seq_ids >= 0, spread, torch.zeros_like(spread))


def value_loss(
    values: torch.Tensor,
    values_old: torch.Tensor,
    returns: torch.Tensor,
    loss_mask: torch.Tensor,
    clip: float = 0.2,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Per-token clipped value loss ½·max((V − R)², (clip(V, V_old ± c) − R)²), 0 off-mask.

    Stats: `vf_clip_frac` (the clipped term is larger) and `vf_loss` (masked mean).
    """
    mask = loss_mask.to(values.dtype)
    returns = returns.detach()
    values_old = values_old.detach()
    clipped_values = values_old + (values - values_old).clamp(-clip, clip)
    plain = (values - returns).square()
    clipped = (clipped_values - returns).square()
    losses = 0.5 * torch.maximum(plain, clipped) * mask
    stats = {
        "vf_loss": _masked_mean(losses.detach(), mask),
        "vf_clip_frac": _masked_mean((clipped > plain).to(mask.dtype), mask),
    }
    return losses, stats


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of the softmax over the last dimension: logsumexp(z) − Σ softmax(z)·z."""
    logits = logits.float() if logits.dtype in (torch.float16, torch.bfloat16) else logits
    probs = torch.softmax(logits, dim=-1)
    return torch.logsumexp(logits, dim=-1) - (probs * logits).sum(dim=-1)


def token_log_probs(logits: torch.Tensor, target_ids: torch.Tensor) -> torch.Tensor:
    """log softmax(logits)[target] per position: logits [..., V], target_ids [...] -> [...]."""
    logits = logits.float() if logits.dtype in (torch.float16, torch.bfloat16) else logits
    gathered = logits.gather(-1, target_ids.long().unsqueeze(-1)).squeeze(-1)
    return gathered - torch.logsumexp(logits, dim=-1)


def _seq_ids(mask: torch.Tensor, seq_index: torch.Tensor | None) -> torch.Tensor:
    if seq_index is not None:
        if seq_index.shape != mask.shape:
            raise ValueError(
                f"seq_index shape {tuple(seq_index.shape)} differs from mask shape {tuple(mask.shape)}"
            )
        return seq_index.long()
    if mask.dim() != 2:
        raise ValueError("pass [B, L] rows or a seq_index for packed 1-D losses")
    return torch.arange(mask.shape[0], device=mask.device).unsqueeze(1).expand_as(mask)


def _per_sequence(values: torch.Tensor, seq_ids: torch.Tensor) -> torch.Tensor:
    """Sum of `values` per sequence id (ids < 0 ignored) -> [num_sequences]."""
    flat_ids = seq_ids.reshape(-1)
    valid = flat_ids >= 0
    num = int(flat_ids.max()) + 1 if valid.any() else 0
    out = torch.zeros(num, dtype=values.dtype, device=values.device)
    return out.index_add(0, flat_ids[valid], values.reshape(-1)[valid])


def loss_normalizers(
    loss_mask: torch.Tensor, seq_index: torch.Tensor | None = None
) -> tuple[int, int]:
    """Local (policy-token count, count of sequences with ≥1 policy token), to sum globally."""
    mask = loss_mask.to(torch.float64)
    token_count = int(mask.sum())
    per_seq = _per_sequence(mask, _seq_ids(mask, seq_index))
    return token_count, int((per_seq > 0).sum())


def aggregate(
    token_losses: torch.Tensor,
    loss_mask: torch.Tensor,
    mode: str = "token-mean",
    norm_length: int | None = None,
    global_token_count: float | None = None,
    global_seq_count: float | None = None,
    seq_index: torch.Tensor | None = None,
) -> torch.Tensor:
    """Reduce per-token losses to a scalar (see the module docstring for the contract)."""
    check_choice("loss aggregation", mode, AGGREGATIONS)
    mask = loss_mask.to(token_losses.dtype)
    masked = token_losses * mask
    if mode == "token-mean":
        tokens = float(mask.sum()) if global_token_count is None else float(global_token_count)
        return masked.sum() / max(tokens, 1.0)
    ids = _seq_ids(mask, seq_index)
    seq_sums = _per_sequence(masked, ids)
    seq_tokens = _per_sequence(mask, ids)
    seqs = float((seq_tokens > 0).sum()) if global_seq_count is None else float(global_seq_count)
    seqs = max(seqs, 1.0)
    if mode == "seq-mean-token-sum":
        return seq_sums.sum() / seqs
    if mode == "seq-mean-token-mean":
        return (seq_sums / seq_tokens.clamp(min=1)).sum() / seqs
    if norm_length is None or norm_length <= 0:
        raise ValueError(
            "seq-mean-token-sum-norm needs a positive norm_length (algo.loss.norm_length)"
        )
    return seq_sums.sum() / (norm_length * seqs)
