"""Off-policy corrections for samples drawn by an older or different policy (docs/algorithms.md §11).

`behaviour_weights` turns the engine's (`behav`) and the proximal (`prox`) log-probs into the
constant per-token weight `w` (`none`, `tis`, `decoupled`, `icepop`, `seq-mis`) that
`policy_loss(..., is_weights=w)` multiplies each clipped term by; no gradient flows through it.
Not here: running a model, knowing about steps or versions.
"""

from __future__ import annotations

import torch

from mua.algo._groups import check_choice
from mua.algo.losses import sequence_sum
from mua.algo_names import CORRECTION_KINDS


def behaviour_weights(
    prox_logp: torch.Tensor,
    behav_logp: torch.Tensor,
    loss_mask: torch.Tensor,
    kind: str,
    cap: float,
    floor: float = 0.5,
    seq_index: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Per-token weights w (0 outside the loss mask) and their statistics.

    `floor` is IcePop's lower bound; `seq-mis` reads `seq_index` (or [B, L] rows, as
    `mua.algo.losses.aggregate`). Stats, as masked means over policy tokens: `is_weight_mean`
    (of w), `is_truncated_frac` (tokens whose raw weight exp(prox − behav) is above `cap`),
    `is_masked_frac` (tokens the correction drops, w = 0: above the cap for `decoupled`, outside
    the band for `icepop`, in a sequence above the cap for `seq-mis`; 0 for `none` and `tis`),
    `behav_kl` (mean of behav − prox, the k1 estimate of KL(behaviour‖proximal)).
    """
    check_choice("off-policy correction", kind, CORRECTION_KINDS)
    if cap <= 1.0:
        raise ValueError(f"the importance-weight cap must be > 1, got {cap}")
    if not 0.0 < floor < 1.0:
        raise ValueError(f"the importance-weight floor must be in (0, 1), got {floor}")
    mask = loss_mask.to(prox_logp.dtype)
    log_w = (prox_logp.detach() - behav_logp.to(prox_logp.dtype)) * mask
    raw = torch.exp(log_w)
    over = (raw > cap) & mask.bool()
    if kind == "seq-mis":  # one weight per sequence: the product of its tokens' ratios
        raw = torch.exp(sequence_sum(log_w, mask, seq_index))
    dropped = _dropped(kind, raw, cap, floor) & mask.bool()
    if kind == "none":
        w = torch.ones_like(raw)
    elif kind == "tis":
        w = raw.clamp(max=cap)
    else:
        w = raw
    w = torch.where(dropped | (mask == 0), torch.zeros_like(w), w)  # no inf·0 off the mask
    count = mask.sum().clamp(min=1)
    stats = {
        "is_weight_mean": w.sum() / count,
        "is_truncated_frac": over.to(mask.dtype).sum() / count,
        "is_masked_frac": dropped.to(mask.dtype).sum() / count,
        "behav_kl": (-log_w * mask).sum() / count,
    }
    return w, stats


def _dropped(kind: str, raw: torch.Tensor, cap: float, floor: float) -> torch.Tensor:
    """Where the correction of `kind` sets the weight `raw` to 0 (bool, like `raw`)."""
    if kind in ("none", "tis"):
        return torch.zeros_like(raw, dtype=torch.bool)
    if kind == "icepop":
        return (raw < floor) | (raw > cap)
    return raw > cap  # decoupled, seq-mis


def sample_staleness(current_version: int, token_versions: list[int], loss_mask: list[int]) -> int:
    """Versions between the policy being trained and the oldest policy that sampled one of the
    sample's policy tokens: current − min(version of a token with mask 1); 0 without such tokens."""
    versions = [v for v, m in zip(token_versions, loss_mask, strict=False) if m]
    if not versions:
        return 0
    return max(0, current_version - min(versions))
