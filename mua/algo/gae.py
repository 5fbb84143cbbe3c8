"""PPO advantages with a critic (docs/algorithms.md §4): token rewards, GAE over policy tokens, whitening.

All tensors are [B, L] with `loss_mask` 1 only on tokens the policy sampled. GAE walks the
*policy* tokens only: injected user/tool/env tokens carry no value and do not advance time, so
V_{i+1} is the value of the next policy token of the same row (0 after the last one). This
module does not compute values (the critic does) nor the value loss (see `losses`).
"""

from __future__ import annotations

import torch


def place_turn_rewards(
    turn_rewards, token_turn_index: torch.Tensor, loss_mask: torch.Tensor
) -> torch.Tensor:
    """Token rewards [B, L]: each turn's reward on the last policy token of that turn, 0 elsewhere.

    `turn_rewards[b]` holds r_{b,1..T_b}; `token_turn_index` is the 0-based turn of each token
    (ignored where the mask is 0). A turn with no policy token is an error: its reward would be lost.
    """
    out = torch.zeros(loss_mask.shape, dtype=torch.get_default_dtype(), device=loss_mask.device)
    for b in range(loss_mask.shape[0]):
        rewards = torch.as_tensor(turn_rewards[b], dtype=out.dtype).reshape(-1).to(out.device)
        policy_positions = loss_mask[b].nonzero().flatten()
        turns = token_turn_index[b].to(out.device)[policy_positions].long()
        for t in range(rewards.numel()):
            in_turn = policy_positions[turns == t]
            if in_turn.numel() == 0:
                if rewards[t] != 0:
                    raise ValueError(f"trajectory {b}: turn {t} has a reward but no policy token")
                continue
            out[b, in_turn[-1]] += rewards[t]
    return out


def gae_over_policy_tokens(
    token_rewards: torch.Tensor,
    values: torch.Tensor,
    loss_mask: torch.Tensor,
    gamma: float = 1.0,
    lam: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(advantages, returns), both [B, L] and 0 outside the loss mask.

    δ_i = r_i + γ V_{next policy token} − V_i, A_i = Σ_k (γλ)^k δ over the following policy
    tokens, returns = A + V. A reward placed on a non-policy token is an error (it would be
    silently dropped); put turn rewards on policy tokens with `place_turn_rewards`.
    """
    mask = loss_mask.to(torch.bool)
    if (token_rewards.masked_fill(mask, 0) != 0).any():
        raise ValueError(
            "token_rewards has a nonzero reward outside the loss mask; rewards must sit on policy tokens"
        )
    rewards = token_rewards.to(torch.float64)
    vals = values.detach().to(torch.float64)
    batch, length = mask.shape
    device = vals.device
    next_value = torch.zeros(batch, dtype=torch.float64, device=device)
    running_adv = torch.zeros(batch, dtype=torch.float64, device=device)
    advantages = torch.zeros(batch, length, dtype=torch.float64, device=device)
    for i in range(length - 1, -1, -1):
        m = mask[:, i]
        delta = rewards[:, i] + gamma * next_value - vals[:, i]
        step_adv = delta + gamma * lam * running_adv
        running_adv = torch.where(m, step_adv, running_adv)
        next_value = torch.where(m, vals[:, i], next_value)
        advantages[:, i] = torch.where(m, step_adv, torch.zeros_like(step_adv))
    returns = torch.where(mask, advantages + vals, torch.zeros_like(advantages))
    dtype = values.dtype if values.is_floating_point() else torch.get_default_dtype()
    return advantages.to(dtype), returns.to(dtype)


def whiten(
    x: torch.Tensor, mask: torch.Tensor, shift_mean: bool = True, eps: float = 1e-8
) -> torch.Tensor:
    """(x − masked mean) / sqrt(masked unbiased var + eps), 0 outside the mask.

    With `shift_mean=False` the mean is added back (only the scale changes). Fewer than two
    masked entries leave x unscaled (variance undefined) but still centred.
    """
    m = mask.to(torch.bool)
    count = int(m.sum())
    if count == 0:
        return torch.zeros_like(x)
    selected = x[m].to(torch.float64)
    mean = selected.mean()
    var = selected.var() if count > 1 else torch.tensor(1.0 - eps, dtype=torch.float64)
    out = (x.to(torch.float64) - mean) * torch.rsqrt(var + eps)
    if not shift_mean:
        out = out + mean
    return torch.where(m, out, torch.zeros_like(out)).to(x.dtype)
