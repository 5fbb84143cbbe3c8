"""One call from per-turn rewards to token advantages for the GRPO family (§1-§3 composed).

`grpo_token_advantages` chains `trajectory_scores` -> `group_advantages` -> `turn_credits` ->
`token_advantages` with the recipe's option names, and dispatches the `turn-group` and `r2g-loo`
credits, which replace Â_b. Trajectories with `valid` False stay in their groups only to be left
out of the baselines and get advantage 0. Not here: filtering (apply `filters` to the result).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import torch

from mua.algo._groups import check_choice
from mua.algo.advantages import group_advantages
from mua.algo.credit import (
    r2g_loo_advantages,
    token_advantages,
    turn_credits,
    turn_group_advantages,
    turn_values_to_tokens,
)
from mua.algo.scores import trajectory_scores
from mua.algo_names import GRPO_CREDIT_KINDS


@dataclass
class GroupAdvantages:
    """Scores S_b [B], trajectory advantages Â_b [B] and token advantages (layout of the mask)."""

    scores: torch.Tensor
    trajectory_advantages: torch.Tensor
    token_advantages: torch.Tensor | list[torch.Tensor]


def grpo_token_advantages(
    turn_rewards: Sequence[Sequence[float] | torch.Tensor],
    group_ids: torch.Tensor | Sequence[Hashable],
    token_turn_index,
    loss_mask,
    score: str = "sum",
    advantage: str = "grpo",
    credit: str = "equalized",
    gamma: float = 1.0,
    eps: float = 1e-6,
    valid: torch.Tensor | Sequence[bool] | None = None,
) -> GroupAdvantages:
    """Token advantages for a batch of trajectories, from the recipe's score/advantage/credit.

    With `credit="turn-group"`, every policy token of turn t gets the group-normalised turn-t
    reward (`credit.turn_group_advantages`), with `credit="r2g-loo"` its reward-to-go minus the
    other members' mean at turn t (`credit.r2g_loo_advantages`); Â_b is still returned for
    logging. `valid[b]` False: trajectory b enters no baseline and gets 0
    (`advantages.group_advantages`); None: all valid.
    """
    check_choice("credit kind", credit, GRPO_CREDIT_KINDS)
    scores = trajectory_scores(turn_rewards, score, gamma)
    traj_adv = group_advantages(scores, group_ids, advantage, eps, valid)
    if credit in ("turn-group", "r2g-loo"):
        per_turn = (
            turn_group_advantages(turn_rewards, group_ids, eps, valid)
            if credit == "turn-group"
            else r2g_loo_advantages(turn_rewards, group_ids, gamma, valid)
        )
        tokens = turn_values_to_tokens(per_turn, token_turn_index, loss_mask)
    else:
        credits = turn_credits(turn_rewards, credit, gamma)
        tokens = token_advantages(traj_adv, credits, token_turn_index, loss_mask)
    return GroupAdvantages(scores, traj_adv, tokens)
