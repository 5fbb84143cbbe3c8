"""Turn-level credit and token advantages (docs/algorithms.md §3).

`turn_credits` (`equalized`, `r2g`, `em`) turns per-turn rewards into per-turn credits;
`token_advantages` spreads a trajectory advantage Â_b over its policy tokens weighted by them.
`turn_group_advantages` (`turn-group`) and `r2g_loo_advantages` (`r2g-loo`) yield per-turn
advantages directly. `token_turn_index` and `loss_mask` may be [B, L] tensors or lists of B 1-D
tensors; the output has the same form. Not here: trajectory scores, the group baseline.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence

import torch

from mua.algo._groups import as_float_list, check_choice, group_index, usable_mask
from mua.algo_names import CREDIT_KINDS


def _credits_one(rewards: torch.Tensor, kind: str, gamma: float, k: float) -> torch.Tensor:
    if kind == "equalized":
        return torch.ones_like(rewards)
    if kind == "em":
        return 0.5 + 0.5 * (1 - torch.exp(-k * rewards)) / (1 - math.exp(-k))
    credits = torch.zeros_like(rewards)
    running = 0.0
    for t in range(rewards.numel() - 1, -1, -1):
        running = float(rewards[t]) + gamma * running
        credits[t] = running
    return credits


def turn_credits(
    turn_rewards: Sequence[Sequence[float] | torch.Tensor],
    kind: str = "equalized",
    gamma: float = 1.0,
    k: float = 2.0,
) -> list[torch.Tensor]:
    """Per-turn credits c_{b,1..T_b} for every trajectory: a list of B 1-D tensors (default dtype)."""
    check_choice("credit kind", kind, CREDIT_KINDS)
    if kind == "em" and k <= 0:
        raise ValueError(f"em credit needs k > 0, got {k}")
    dtype = torch.get_default_dtype()
    return [_credits_one(r, kind, gamma, k).to(dtype) for r in as_float_list(turn_rewards)]


def _token_weights(
    credits: torch.Tensor, turn_index: torch.Tensor, mask: torch.Tensor
) -> torch.Tensor:
    """a_i = c_{turn(i)} on policy tokens, 0 elsewhere; raises if a policy token has no turn."""
    credits = credits.to(mask.device)
    policy = mask.bool()
    idx = turn_index.long().to(mask.device)
    bad = policy & ((idx < 0) | (idx >= credits.numel()))
    if bad.any():
        raise ValueError(
            f"a policy token has turn index {int(idx[bad][0])} but the trajectory has "
            f"{credits.numel()} turn credits; check token_turn_index"
        )
    safe_idx = torch.where(policy, idx, torch.zeros_like(idx))
    if credits.numel() == 0:
        return torch.zeros(mask.shape, dtype=credits.dtype, device=mask.device)
    return torch.where(
        policy, credits[safe_idx], torch.zeros((), dtype=credits.dtype, device=mask.device)
    )


def _token_advantages_one(adv: float, credits, turn_index, mask) -> torch.Tensor:
    weights = _token_weights(torch.as_tensor(credits, dtype=torch.float64), turn_index, mask)
    total = weights.sum()
    if total == 0:
        return torch.zeros(mask.shape, dtype=torch.get_default_dtype(), device=mask.device)
    num_credited = (weights != 0).sum()
    return (adv * weights * num_credited / total).to(torch.get_default_dtype())


def token_advantages(traj_adv, turn_credits, token_turn_index, loss_mask):
    """Token advantages A_i = Â_b · a_i · N_b / Σ_i a_i (docs/algorithms.md §3).

    a_i = c_t for a policy token of turn t and 0 elsewhere; N_b counts tokens with a_i ≠ 0.
    When Σ_i a_i = 0 the whole trajectory gets 0. `traj_adv` has shape [B]; `turn_credits` is a
    list of B 1-D credit tensors; see the module docstring for the token layout.
    """
    traj_adv = torch.as_tensor(traj_adv).reshape(-1)
    batch = traj_adv.numel()
    if len(turn_credits) != batch or len(token_turn_index) != batch or len(loss_mask) != batch:
        raise ValueError(
            "traj_adv, turn_credits, token_turn_index and loss_mask need one entry per trajectory"
        )
    rows = [
        _token_advantages_one(
            float(traj_adv[b]), turn_credits[b], token_turn_index[b], loss_mask[b]
        )
        for b in range(batch)
    ]
    if isinstance(loss_mask, torch.Tensor):
        return torch.stack(rows) if rows else torch.zeros(loss_mask.shape)
    return rows


def turn_values_to_tokens(turn_values, token_turn_index, loss_mask):
    """Put per-turn values (e.g. `turn_group_advantages`) on every policy token of that turn.

    Same layouts as `token_advantages`; tokens outside the loss mask get 0.
    """
    rows = [
        _token_weights(
            torch.as_tensor(turn_values[b], dtype=torch.float64), token_turn_index[b], loss_mask[b]
        ).to(torch.get_default_dtype())
        for b in range(len(turn_values))
    ]
    if isinstance(loss_mask, torch.Tensor):
        return torch.stack(rows) if rows else torch.zeros(loss_mask.shape)
    return rows


def _slot_values(
    values: list[torch.Tensor], index: torch.Tensor, usable: list[bool]
) -> dict[tuple[int, int], list[float]]:
    """(group, turn index) -> the values of the usable members of that group that reached it."""
    by_slot: dict[tuple[int, int], list[float]] = {}
    for b, v in enumerate(values):
        for t, value in enumerate(v.tolist() if usable[b] else []):
            by_slot.setdefault((int(index[b]), t), []).append(value)
    return by_slot


def turn_group_advantages(
    turn_rewards: Sequence[Sequence[float] | torch.Tensor],
    group_ids: torch.Tensor | Sequence[Hashable],
    eps: float = 1e-6,
    valid: torch.Tensor | Sequence[bool] | None = None,
) -> list[torch.Tensor]:
    """Per-turn group normalisation (credit kind `turn-group`): one advantage per turn.

    For turn t of trajectory b in group g: (r_{b,t} − mean) / (std + ε), where mean and the
    unbiased std are taken over the turn-t rewards of the trajectories of g that reached turn t.
    When only one trajectory of the group reached turn t, mean 0 and std 1 are used (as for a
    GRPO group of one). Put the result on tokens with `turn_values_to_tokens`; it replaces Â_b
    rather than multiplying it. As in `advantages.group_advantages`, an invalid trajectory
    (`valid[b]` False) gets zeros and enters no statistic, and so does the last valid member of a
    group that masking left with fewer than 2.
    """
    rewards = as_float_list(turn_rewards)
    index, num_groups = group_index(group_ids, len(rewards))
    usable = usable_mask(valid, index, num_groups).tolist()
    stats = {}
    for slot, values in _slot_values(rewards, index, usable).items():
        if len(values) == 1:
            stats[slot] = (0.0, 1.0)
        else:
            v = torch.tensor(values, dtype=torch.float64)
            stats[slot] = (float(v.mean()), float(v.std()))
    out = []
    for b, r in enumerate(rewards):
        adv = [
            (value - stats[(int(index[b]), t)][0]) / (stats[(int(index[b]), t)][1] + eps)
            if usable[b]
            else 0.0
            for t, value in enumerate(r.tolist())
        ]
        out.append(torch.tensor(adv, dtype=torch.get_default_dtype()))
    return out


def r2g_loo_advantages(
    turn_rewards: Sequence[Sequence[float] | torch.Tensor],
    group_ids: torch.Tensor | Sequence[Hashable],
    gamma: float = 1.0,
    valid: torch.Tensor | Sequence[bool] | None = None,
) -> list[torch.Tensor]:
    """Reward-to-go minus a leave-one-out baseline per turn (credit kind `r2g-loo`).

    For turn t of trajectory b in group g: G_{b,t} − mean of G_{b',t} over the other usable
    members b' of g that reached turn t, where G_{b,t} = r_{b,t} + γ G_{b,t+1} (the `r2g`
    credit). A turn that no other member reached gets baseline 0 (its advantage is G_{b,t}).
    The baseline never reads b's own rewards, so with γ = 1 the expected update is the exact
    gradient of the expected sum of rewards, whoever decides when the episode stops. Replaces
    Â_b like `turn-group`; invalid trajectories get zeros and enter no baseline.
    """
    to_go = [_credits_one(r, "r2g", gamma, 0.0) for r in as_float_list(turn_rewards)]
    index, num_groups = group_index(group_ids, len(to_go))
    usable = usable_mask(valid, index, num_groups).tolist()
    sums = {slot: (sum(v), len(v)) for slot, v in _slot_values(to_go, index, usable).items()}
    out = []
    for b, g in enumerate(to_go):
        adv = [0.0] * g.numel()
        for t, value in enumerate(g.tolist() if usable[b] else []):
            total, count = sums[(int(index[b]), t)]
            adv[t] = value - (total - value) / (count - 1) if count > 1 else value
        out.append(torch.tensor(adv, dtype=torch.get_default_dtype()))
    return out
