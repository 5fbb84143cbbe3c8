"""KL to a reference model (docs/algorithms.md §6): per-token estimators k1, k2, k3 and the
reward placement.

Inputs are per-token log-probs of the sampled tokens under the policy and the reference model;
the loss placement is `coef * kl_penalty(...)` added in `losses.policy_loss`. Not here: loading
a reference model, deciding when one is needed (none is when β = 0).
"""

from __future__ import annotations

import torch

from mua.algo._groups import check_choice
from mua.algo_names import KL_ESTIMATORS

K3_CLAMP = 10.0


def kl_penalty(logp: torch.Tensor, logp_ref: torch.Tensor, estimator: str = "k3") -> torch.Tensor:
    """Per-token KL estimate, same shape as `logp` (differentiable w.r.t. `logp`)."""
    check_choice("kl estimator", estimator, KL_ESTIMATORS)
    diff = logp - logp_ref
    if estimator == "k1":
        return diff
    if estimator == "k2":
        return 0.5 * diff.square()
    ref_minus = -diff
    return (torch.exp(ref_minus) - ref_minus - 1).clamp(min=-K3_CLAMP, max=K3_CLAMP)


def kl_in_reward(
    token_rewards: torch.Tensor, kl: torch.Tensor, coef: float, loss_mask: torch.Tensor
) -> torch.Tensor:
    """`kl.placement: reward`: r_i − β · kl_i on policy tokens, rewards unchanged elsewhere."""
    return token_rewards - coef * kl.detach() * loss_mask.to(kl.dtype)
