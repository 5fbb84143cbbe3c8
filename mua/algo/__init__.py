"""RL math for mua: pure tensor functions (docs/algorithms.md). No I/O, no models, no processes.

Per-trajectory quantities (scores, advantages, credits, filters) are computed on the CPU;
token-level functions (token advantages, GAE, whitening, KL, losses, aggregation) return tensors
on the device of their mask. Counts that must be global across micro-batches and ranks are passed
in by the caller. Option strings match the recipe fields in `mua.config.train`; the order in
which a GRPO or PPO step calls these functions is in docs/algorithms.md ("The functions in order").
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
