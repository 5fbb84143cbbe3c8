"""Turn credits, token advantages (§3) and per-turn group normalisation against hand values."""

from __future__ import annotations

import math
from functools import partial

import pytest
import torch

from mua.algo import token_advantages, turn_credits, turn_group_advantages, turn_values_to_tokens
from mua.algo.credit import r2g_loo_advantages
from tests.unit.algo_asserts import assert_close

torch.set_num_threads(1)

# one trajectory: system/user (-1), turn 0 (2 tokens), user (-1), turn 1 (1 token), tool (-1), turn 2 (2 tokens)
TURN_INDEX = torch.tensor([[-1, 0, 0, -1, 1, -1, 2, 2]])
MASK = torch.tensor([[0, 1, 1, 0, 1, 0, 1, 1]])


close = partial(assert_close, tol=1e-5)


def test_worked_example_credits():
    rewards = [[0.0, 0.0, 1.0]]
    close(turn_credits(rewards, "r2g", gamma=0.8)[0], [0.64, 0.8, 1.0])
    close(turn_credits(rewards, "em")[0], [0.5, 0.5, 1.0])
    close(turn_credits(rewards, "equalized")[0], [1.0, 1.0, 1.0])


def test_em_credit_formula_other_k_and_values():
    (credits,) = turn_credits([[0.5, -1.0]], "em", k=3.0)
    expected = [0.5 + 0.5 * (1 - math.exp(-3 * r)) / (1 - math.exp(-3)) for r in (0.5, -1.0)]
    close(credits, expected)


def test_token_advantages_weighted_by_em_credits():
    adv = token_advantages(torch.tensor([2.0]), [torch.tensor([0.5, 0.5, 1.0])], TURN_INDEX, MASK)
    scale = 2.0 * 5 / 3.5  # Â · N_b / Σ a_i
    close(adv, [[0, 0.5 * scale, 0.5 * scale, 0, 0.5 * scale, 0, scale, scale]])
    # the mean over policy tokens is Â_b
    assert abs(float(adv[MASK.bool()].mean()) - 2.0) < 1e-5


def test_equalized_credit_gives_every_policy_token_the_trajectory_advantage():
    credits = turn_credits([[0.0, 1.0, 0.0]], "equalized")
    adv = token_advantages(torch.tensor([-0.7]), credits, TURN_INDEX, MASK)
    close(adv, [[0, -0.7, -0.7, 0, -0.7, 0, -0.7, -0.7]])


def test_r2g_counts_only_nonzero_credit_tokens_and_all_zero_gives_zero():
    credits = turn_credits(
        [[0.0, 1.0, 0.0], [0.0, 0.0, 0.0]], "r2g", gamma=1.0
    )  # [1,1,0] and [0,0,0]
    index = TURN_INDEX.repeat(2, 1)
    mask = MASK.repeat(2, 1)
    adv = token_advantages(torch.tensor([1.5, -1.0]), credits, index, mask)
    # first: a = [0,1,1,0,1,0,0,0], N_b = 3, Σa = 3 -> Â on turn 0/1 tokens, 0 on turn 2
    close(adv[0], [0, 1.5, 1.5, 0, 1.5, 0, 0, 0])
    close(adv[1], torch.zeros(8))  # failures are never pushed down with r2g


def test_token_advantages_ragged_lists():
    credits = turn_credits([[1.0], [0.0, 1.0]], "em")
    index = [torch.tensor([-1, 0, 0]), torch.tensor([0, -1, 1])]
    mask = [torch.tensor([0, 1, 1]), torch.tensor([1, 0, 1])]
    adv = token_advantages([1.0, 3.0], credits, index, mask)
    assert isinstance(adv, list)
    close(adv[0], [0, 1, 1])
    close(adv[1], [3 * 0.5 * 2 / 1.5, 0, 3 * 1.0 * 2 / 1.5])


def test_token_advantages_reject_policy_token_without_turn():
    with pytest.raises(ValueError, match="turn index"):
        token_advantages(
            torch.tensor([1.0]),
            [torch.tensor([1.0])],
            torch.tensor([[0, 1]]),
            torch.tensor([[1, 1]]),
        )
    with pytest.raises(ValueError, match="unknown credit kind"):
        turn_credits([[1.0]], "gae")


def test_turn_group_normalises_each_turn_across_the_group():
    rewards = [[1.0, 0.0], [0.0, 1.0, 1.0], [0.0], [1.0]]
    out = turn_group_advantages(rewards, ["g", "g", "g", "h"], eps=1e-6)
    s0 = math.sqrt(1.0 / 3.0)  # turn 0 of g: [1, 0, 0], mean 1/3
    s1 = math.sqrt(0.5)  # turn 1 of g: [0, 1], mean 1/2
    close(out[0], [(2 / 3) / (s0 + 1e-6), -0.5 / (s1 + 1e-6)])
    close(out[1], [(-1 / 3) / (s0 + 1e-6), 0.5 / (s1 + 1e-6), 1.0 / (1 + 1e-6)])  # turn 2: alone
    close(out[2], [(-1 / 3) / (s0 + 1e-6)])
    close(out[3], [1.0 / (1 + 1e-6)])  # group of one


def test_turn_values_to_tokens_places_per_turn_values():
    tokens = turn_values_to_tokens([torch.tensor([0.3, -1.0, 2.0])], TURN_INDEX, MASK)
    close(tokens, [[0, 0.3, 0.3, 0, -1.0, 0, 2.0, 2.0]])


def test_grpo_token_advantages_chains_score_baseline_and_credit():
    from mua.algo import grpo_token_advantages

    rewards = [[0.0, 0.0, 1.0], [0.0, 0.0, 0.0]]
    index, mask = TURN_INDEX.repeat(2, 1), MASK.repeat(2, 1)
    out = grpo_token_advantages(rewards, ["t", "t"], index, mask, "r2g", "drgrpo", "em", gamma=0.8)
    close(out.scores, [0.64, 0.0])
    close(out.trajectory_advantages, [0.32, -0.32])
    scale = 0.32 * 5 / 3.5  # em credits [.5, .5, 1] on tokens [.5, .5, .5, 1, 1]
    close(out.token_advantages[0], [0, 0.5 * scale, 0.5 * scale, 0, 0.5 * scale, 0, scale, scale])
    close(out.token_advantages[1], -0.32 * MASK[0])  # all-zero rewards: em credits all 0.5


def test_grpo_token_advantages_turn_group_replaces_trajectory_advantage():
    from mua.algo import grpo_token_advantages

    rewards = [[0.0, 1.0, 1.0], [1.0, 1.0, 0.0]]
    index, mask = TURN_INDEX.repeat(2, 1), MASK.repeat(2, 1)
    out = grpo_token_advantages(rewards, [0, 0], index, mask, "sum", "grpo", "turn-group")
    a = 0.5 / (math.sqrt(0.5) + 1e-6)  # each turn: rewards {0, 1} -> ±a, turn 1 equal -> 0
    close(out.token_advantages[0], [0, -a, -a, 0, 0, 0, a, a])
    close(out.token_advantages[1], [0, a, a, 0, 0, 0, -a, -a])
    close(out.trajectory_advantages, [0.0, 0.0])
    with pytest.raises(ValueError, match="unknown credit kind"):
        grpo_token_advantages(rewards, [0, 0], index, mask, credit="turn")


def test_r2g_loo_subtracts_the_other_members_mean_reward_to_go_at_each_turn():
    rewards = [[-0.1, 1.0], [-0.1, -0.1, -0.1], [0.5], [5.0, 5.0], [2.0], [1.0], [3.0]]
    groups = ["g", "g", "g", "g", "h", "k", "k"]
    valid = [True, True, True, False, True, True, False]  # g's 4th and k's 2nd are masked
    out = r2g_loo_advantages(rewards, groups, gamma=0.5, valid=valid)
    # reward-to-go: [0.4, 1.0], [-0.175, -0.15, -0.1], [0.5]
    close(out[0], [0.4 - (-0.175 + 0.5) / 2, 1.0 - (-0.15)])
    close(out[1], [-0.175 - (0.4 + 0.5) / 2, -0.15 - 1.0, -0.1])  # turn 2: no other, baseline 0
    close(out[2], [0.5 - (0.4 - 0.175) / 2])
    close(out[3], [0.0, 0.0])  # masked: zeros, in no baseline
    close(out[4], [2.0])  # a group of one: baseline 0
    close(out[5], [0.0])  # masking left k with one member: no baseline, 0
    close(out[6], [0.0])


def test_grpo_token_advantages_r2g_loo_puts_per_turn_advantages_on_tokens():
    from mua.algo import grpo_token_advantages

    rewards = [[0.0, 0.0, 1.0], [0.0, -0.5, 0.0]]
    index, mask = TURN_INDEX.repeat(2, 1), MASK.repeat(2, 1)
    out = grpo_token_advantages(rewards, [0, 0], index, mask, "sum", "drgrpo", "r2g-loo", 1.0)
    # reward-to-go [1, 1, 1] and [-0.5, -0.5, 0]: each turn minus the other's
    close(out.token_advantages[0], [0, 1.5, 1.5, 0, 1.5, 0, 1.0, 1.0])
    close(out.token_advantages[1], [0, -1.5, -1.5, 0, -1.5, 0, -1.0, -1.0])
    close(out.trajectory_advantages, [0.75, -0.75])
