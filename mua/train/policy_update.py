"""The RL step's update: epochs x mini-batches of optimizer steps on the policy (and the critic).

`update` splits the step's samples into mini-batches by global batch position, trains the critic
(PPO) and the policy on each, and returns the metrics and, with one epoch of one mini-batch, the
update forward's own detached log-probs (the "old" ones). `policy_mini_batch` accumulates one
mini-batch's loss over packed micro-batches (`mua.train.packed_forward.accumulate`) with loss
normalisers summed over ranks, so the result does not depend on the micro-batch budget or the
number of ranks; the policy loss (`algo.loss.kind`) and the off-policy weights (`algo.correction`)
are applied here, each sample a sequence of its own.
Not here: rollouts, scoring and advantages (`mua.train.rl`), the loss formulas (`mua.algo`).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import torch

from mua.algo import aggregate, behaviour_weights, kl_penalty, policy_loss
from mua.distributed import all_reduce_sum
from mua.distributed.fsdp import clip_grad_norm
from mua.models.moe_replay import Replay
from mua.train.critic import epoch_losses
from mua.train.guards import check_finite
from mua.train.packed_batch import concat_per_token, first_token_mask
from mua.train.packed_forward import accumulate
from mua.train.rl_batch import RLSample, split_mini_batches
from mua.train.rl_metrics import update_metrics

# the policy loss's and the correction's statistics, logged as `actor/<name>` (token-weighted means)
LOGGED_STATS = (
    "pg_loss", "clip_frac", "approx_kl", "ratio_mean", "entropy", "kl",
    "is_weight_mean", "is_truncated_frac", "is_masked_frac", "behav_kl",
)  # fmt: skip


@dataclass(frozen=True)
class UpdateResult:
    metrics: dict[str, float]
    old_logprobs: list[torch.Tensor] | None  # the update forward's, when it provided them
    # mixture of experts, with the old log-probs from the update forward: (token, layer)
    # decisions with an engine record, and those the trainer's routers made differently
    routing: tuple[int, int] = (0, 0)


def update(
    model,
    optimizer,
    scheduler,
    critic,
    samples: list[RLSample],
    *,
    algo,
    parallel,
    grad_clip: float,
    global_batch: int,
    temperature: float,
    dist,
    train_policy: bool,
    with_ref: bool,
    old_from_forward: bool,
) -> UpdateResult:
    """Epochs x mini-batches of optimizer steps on the policy (and the critic, for PPO)."""
    totals: Counter = Counter()
    grad_norms, lrs, critic_losses = [], [], []
    forward_old: list[torch.Tensor] | None = None
    routing = (0, 0)
    for _ in range(algo.epochs):
        for mini in split_mini_batches(samples, global_batch, algo.mini_batches):
            if critic is not None:
                stats, pass_loss = critic.train_mini_batch(
                    mini,
                    algo,
                    micro_batch_tokens=parallel.micro_batch_tokens,
                    grad_clip=grad_clip,
                    device=dist.device,
                    world_size=dist.world_size,
                )
                totals.update(stats)
                critic_losses.append(pass_loss)
            if not train_policy:
                continue
            # The optimizer's parameters, not `model.zero_grad()`: while FSDP2 holds a module
            # unsharded (the root, after a forward without backward) the module names the
            # unsharded parameters, and the sharded gradients would be left in place.
            optimizer.zero_grad(set_to_none=True)
            stats, grad_norm, mini_old, replay = policy_mini_batch(
                model,
                mini,
                algo=algo,
                parallel=parallel,
                grad_clip=grad_clip,
                temperature=temperature,
                dist=dist,
                with_ref=with_ref,
                old_from_forward=old_from_forward,
            )
            check_finite(stats.get("loss", 0.0), grad_norm)
            forward_old = mini_old if old_from_forward else None  # one mini-batch: all samples
            if old_from_forward and replay is not None:
                routing = (replay.compared, replay.differ)
            totals.update(stats)
            grad_norms.append(grad_norm)
            lrs.append(optimizer.param_groups[0]["lr"])
            optimizer.step()
            scheduler.step()
    metrics = update_metrics(totals, grad_norms, lrs)
    if critic is not None:
        metrics.update(epoch_losses(critic_losses, algo.mini_batches))
    return UpdateResult(metrics=metrics, old_logprobs=forward_old, routing=routing)


def policy_mini_batch(
    model,
    mini: list[RLSample],
    *,
    algo,
    parallel,
    grad_clip: float,
    temperature: float,
    dist,
    with_ref: bool,
    old_from_forward: bool,
) -> tuple[Counter, float, list[torch.Tensor] | None, Replay | None]:
    """Accumulate one mini-batch's policy loss over micro-batches: (stat sums, grad norm, the
    forward's detached log-probs when `old_from_forward`, a mixture of experts' `Replay`)."""
    world, device = dist.world_size, dist.device
    masks = [s.tensors.loss_mask for s in mini]
    counts = [int(m[1:].sum()) for m in masks]
    local_tokens, local_seqs = sum(counts), sum(1 for c in counts if c > 0)
    tokens, seqs = (float(x) for x in all_reduce_sum([local_tokens, local_seqs]))
    kl_in_loss, replay = with_ref and algo.kl.placement == "loss", sample_replay(mini, algo)

    def loss_fn(mb, scores):
        mask = concat_per_token(masks, mb.indices, device=device) * first_token_mask(
            mb.lengths, device
        )
        adv = concat_per_token([s.advantages for s in mini], mb.indices, device=device)
        logp, entropy = scores
        if old_from_forward:
            old = logp.detach()
        else:
            old = concat_per_token([s.old_logprobs for s in mini], mb.indices, device=device)
        seq_index = torch.repeat_interleave(
            torch.arange(len(mb.lengths), device=device), torch.tensor(mb.lengths, device=device)
        )
        behav = None
        if algo.correction != "none":  # the behaviour policy is the engine's (docs §11)
            behav = concat_per_token([s.tensors.logprobs for s in mini], mb.indices, device=device)
        kl = None
        if kl_in_loss:
            ref = concat_per_token([s.ref_logprobs for s in mini], mb.indices, device=device)
            kl = kl_penalty(logp, ref, algo.kl.estimator)
        losses, st = policy_token_losses(
            algo, logp, old, adv, mask, seq_index, entropy=entropy, kl=kl, behav=behav
        )
        loss = aggregate(
            losses,
            mask,
            algo.loss.aggregation,
            algo.loss.norm_length,
            global_token_count=tokens,
            global_seq_count=seqs,
            seq_index=seq_index,
        )
        return loss * world, _micro_batch_stats(loss, st, mb, old if old_from_forward else None)

    stats = accumulate(
        model,
        [s.token_ids for s in mini],
        parallel.micro_batch_tokens,
        device,
        loss_fn,
        masks=[s.loss_mask for s in mini],
        share_prefixes=parallel.share_prefixes,
        temperature=temperature,
        entropy_grad=bool(algo.loss.entropy_coef),
        replay=replay, router_aux_coef=getattr(algo, "router_aux_coef", 0.0),
    )  # fmt: skip
    grad_norm = clip_grad_norm(model, grad_clip)
    forward_old: list | None = [None for _ in mini] if old_from_forward else None
    totals: Counter = Counter()
    for st in stats:
        for i, lp in st.pop("old_logprobs", []):
            forward_old[i] = lp
        totals.update(st)
    return totals, grad_norm, forward_old, replay


def _micro_batch_stats(loss, st: dict, mb, forward_old) -> dict:
    """What one micro-batch reports: its loss, token count and token-weighted stat sums, and
    (`forward_old`: the forward's own log-probs) each sample's detached old log-probs."""
    n_tok = float(st["tokens"])
    out = {"loss": float(loss.detach()), "mb_tokens": n_tok}
    out.update({f"sum/{key}": float(st[key]) * n_tok for key in LOGGED_STATS if key in st})
    if forward_old is not None:
        split = torch.split(forward_old.cpu(), mb.lengths)
        out["old_logprobs"] = list(zip(mb.indices, split, strict=True))
    return out


def sample_replay(samples: list[RLSample], algo) -> Replay | None:
    """The samples' routed-experts records for a forward over them, enforced with
    `algo.routing_replay: r3`; None when none has a record (a dense model)."""
    routes = [s.routes for s in samples]
    if all(r is None for r in routes):
        return None
    return Replay(routes, enforce=getattr(algo, "routing_replay", "off") == "r3")


def policy_token_losses(algo, logp, old, adv, mask, seq_index, *, entropy, kl, behav):
    """Per-token policy losses of `algo.loss.kind` (docs §5), weighted by `algo.correction` from
    the engine's log-probs `behav` (docs §11), and their statistics."""
    weights, is_stats = None, {}
    if algo.correction != "none":
        weights, is_stats = behaviour_weights(
            old, behav, mask, algo.correction, algo.correction_cap,
            algo.correction_floor, seq_index,
        )  # fmt: skip
    losses, stats = policy_loss(
        logp,
        old,
        adv,
        mask,
        algo.loss.clip_low,
        algo.loss.clip_high,
        algo.loss.dual_clip,
        entropy=entropy,
        entropy_coef=algo.loss.entropy_coef,
        kl=kl,
        kl_coef=algo.kl.coef if kl is not None else 0.0,
        is_weights=weights,
        kind=algo.loss.kind,
        seq_index=seq_index,
    )
    return losses, {**stats, **is_stats}
