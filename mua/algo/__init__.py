"""RL math for mua: pure tensor functions (docs/algorithms.md §1-§7, §10). No I/O, no models, no processes.

Every function takes tensors or Python lists and returns tensors (or floats); counts that must be
global across micro-batches and ranks are passed in by the caller. Per-trajectory quantities
(scores, advantages, credits, filters) are computed on the CPU; token-level functions (token
advantages, GAE, whitening, KL, losses, aggregation) return tensors on the device of their mask. Option strings match the
recipe fields in `mua.config.train`.

Pipeline for GRPO-family training (B trajectories, ragged per-turn rewards):

    scores  = trajectory_scores(turn_rewards, kind="sum"|"mean"|"r2g"|"outcome", gamma)       # [B]
    valid   = termination_mask(reasons, mask_truncated).bool()        # failures always out
    keep    = valid & ~zero_variance_groups(scores, group_ids, valid=valid)  # DAPO, valid only
    adv     = group_advantages(scores, group_ids, kind="grpo"|"drgrpo"|"rloo"|"reinforce++", eps,
                               valid=valid)   # masked: no baseline share, advantage 0
    credits = turn_credits(turn_rewards, kind="equalized"|"r2g"|"em", gamma, k=2)
    tok_adv = token_advantages(adv, credits, token_turn_index, loss_mask)  # A_i = Â_b·a_i·N_b/Σa_i
    # or, per-turn group normalisation (credit `turn-group`):
    #   tok_adv = turn_values_to_tokens(turn_group_advantages(turn_rewards, group_ids), ...)
    # or reward-to-go minus a leave-one-out baseline per turn (credit `r2g-loo`, unbiased):
    #   tok_adv = turn_values_to_tokens(r2g_loo_advantages(turn_rewards, group_ids, gamma), ...)

PPO with a critic:

    r      = place_turn_rewards(turn_rewards, token_turn_index, loss_mask)
    r      = kl_in_reward(r, kl_penalty(logp, logp_ref, "k1"|"k2"|"k3"), beta, loss_mask)  # placement: reward
    adv, R = gae_over_policy_tokens(r, values, loss_mask, gamma, lam)   # policy tokens only
    adv    = whiten(adv, loss_mask)
    vf, _  = value_loss(values_new, values, R, loss_mask, clip=value_clip)

The same GRPO chain in one call, with the recipe's option names (credit may also be `turn-group`):

    out = grpo_token_advantages(turn_rewards, group_ids, token_turn_index, loss_mask,
                                score, advantage, credit, gamma, eps,
                                valid=valid)   # .scores, .token_advantages

Policy update (both):

    losses, stats = policy_loss(logp, logp_old, tok_adv, loss_mask, clip_low, clip_high, dual_clip,
                                entropy=entropy_from_logits(logits), entropy_coef=c, kl=kl, kl_coef=beta,
                                kind="ppo-clip"|"gspo"|"gspo-token"|"cispo", seq_index=seq_index)
    T, S = loss_normalizers(loss_mask)        # sum over micro-batches, all-reduce over ranks
    loss = aggregate(losses, loss_mask, "token-mean"|"seq-mean-token-sum"|"seq-mean-token-mean"|
                     "seq-mean-token-sum-norm", norm_length, global_token_count=T, global_seq_count=S)

Samples from an older (or different) behaviour policy (asynchronous RL, docs/async_rl.md):

    w, _   = behaviour_weights(logp_old, logp_engine, loss_mask,
                               "none"|"tis"|"decoupled"|"icepop"|"seq-mis", cap, floor, seq_index)
    losses, stats = policy_loss(..., is_weights=w)

Partial losses of micro-batches built with the global counts sum exactly to the full mini-batch
loss (see `mua.algo.losses`). Metrics: pass_at_k, pass_hat_k (tau-bench pass^k) and their means.

Warning: with `r2g` credits an all-zero-reward trajectory has all credits 0, hence all token
advantages 0 and zero gradient: failures are never pushed down. Prefer `equalized` or `em` when
most trajectories fail.

UserRL's "Sum" trajectory score is mua's `mean` (it averages over turns).
"""

from mua.algo.advantages import ADVANTAGE_KINDS, group_advantages
from mua.algo.credit import (
    CREDIT_KINDS,
    r2g_loo_advantages,
    token_advantages,
    turn_credits,
    turn_group_advantages,
    turn_values_to_tokens,
)
from mua.algo.filters import (
    FAILURE_REASONS,
    TRUNCATION_REASONS,
    termination_mask,
    zero_variance_groups,
)
from mua.algo.gae import gae_over_policy_tokens, place_turn_rewards, whiten
from mua.algo.kl import KL_ESTIMATORS, kl_in_reward, kl_penalty
from mua.algo.losses import (
    AGGREGATIONS,
    POLICY_LOSS_KINDS,
    aggregate,
    entropy_from_logits,
    loss_normalizers,
    policy_loss,
    token_log_probs,
    value_loss,
)
from mua.algo.offpolicy import CORRECTION_KINDS, behaviour_weights, sample_staleness
from mua.algo.pass_metrics import (
    mean_pass_at_k,
    mean_pass_hat_k,
    pass_at_k,
    pass_hat_k,
    success_counts,
)
from mua.algo.pipeline import GRPO_CREDIT_KINDS, GroupAdvantages, grpo_token_advantages
from mua.algo.scores import SCORE_KINDS, trajectory_scores

__all__ = [
    "ADVANTAGE_KINDS",
    "AGGREGATIONS",
    "CORRECTION_KINDS",
    "CREDIT_KINDS",
    "FAILURE_REASONS",
    "GRPO_CREDIT_KINDS",
    "GroupAdvantages",
    "KL_ESTIMATORS",
    "POLICY_LOSS_KINDS",
    "SCORE_KINDS",
    "TRUNCATION_REASONS",
    "aggregate",
    "behaviour_weights",
    "entropy_from_logits",
    "gae_over_policy_tokens",
    "group_advantages",
    "grpo_token_advantages",
    "kl_in_reward",
    "kl_penalty",
    "loss_normalizers",
    "mean_pass_at_k",
    "mean_pass_hat_k",
    "pass_at_k",
    "pass_hat_k",
    "place_turn_rewards",
    "r2g_loo_advantages",
    "sample_staleness",
    "policy_loss",
    "success_counts",
    "termination_mask",
    "token_advantages",
    "token_log_probs",
    "trajectory_scores",
    "turn_credits",
    "turn_group_advantages",
    "turn_values_to_tokens",
    "value_loss",
    "whiten",
    "zero_variance_groups",
]
