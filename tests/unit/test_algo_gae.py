"""GAE over policy tokens, token-reward placement and whitening (§4) against hand values."""

from __future__ import annotations

from functools import partial

import pytest
import torch

from mua.algo import gae_over_policy_tokens, kl_in_reward, place_turn_rewards, whiten
from tests.unit.algo_asserts import assert_close

torch.set_num_threads(1)


close = partial(assert_close, tol=1e-6)


def test_gae_skips_injected_tokens():
    # policy tokens at 0, 1, 4; positions 2-3 are an injected user turn with junk values
    mask = torch.tensor([[1, 1, 0, 0, 1]])
    values = torch.tensor([[0.5, 0.4, 9.0, -9.0, 0.2]])
    rewards = torch.tensor([[0.0, 0.0, 0.0, 0.0, 1.0]])
    adv, ret = gae_over_policy_tokens(rewards, values, mask, gamma=0.9, lam=0.8)
    # δ4 = 1 − .2 = .8; δ1 = .9·.2 − .4 = −.22; δ0 = .9·.4 − .5 = −.14 ; γλ = .72
    a4 = 0.8
    a1 = -0.22 + 0.72 * a4
    a0 = -0.14 + 0.72 * a1
    close(adv, [[a0, a1, 0.0, 0.0, a4]])
    close(ret, [[a0 + 0.5, a1 + 0.4, 0.0, 0.0, a4 + 0.2]])


def test_gae_equals_plain_gae_on_the_compacted_sequence():
    torch.manual_seed(0)
    mask = torch.tensor([[0, 1, 1, 0, 0, 1, 1, 1, 0], [1, 0, 1, 1, 1, 0, 0, 1, 0]])
    values = torch.randn(2, 9)
    rewards = torch.randn(2, 9) * mask
    adv, ret = gae_over_policy_tokens(rewards, values, mask, gamma=0.95, lam=0.9)
    for b in range(2):
        keep = mask[b].bool()
        r, v = rewards[b][keep].tolist(), values[b][keep].tolist()
        expected, running = [0.0] * len(r), 0.0
        for i in reversed(range(len(r))):
            nxt = v[i + 1] if i + 1 < len(r) else 0.0
            running = r[i] + 0.95 * nxt - v[i] + 0.95 * 0.9 * running
            expected[i] = running
        close(adv[b][keep], expected, tol=1e-5)
        close(ret[b][keep], [a + x for a, x in zip(expected, v, strict=True)], tol=1e-5)
        assert (adv[b][~keep] == 0).all() and (ret[b][~keep] == 0).all()


def test_gae_gamma_lambda_one_is_return_to_go_minus_value():
    mask = torch.tensor([[1, 0, 1, 1]])
    values = torch.tensor([[0.1, 5.0, 0.2, 0.3]])
    rewards = torch.tensor([[0.5, 0.0, 0.0, 1.0]])
    adv, ret = gae_over_policy_tokens(rewards, values, mask, gamma=1.0, lam=1.0)
    close(adv, [[1.5 - 0.1, 0.0, 1.0 - 0.2, 1.0 - 0.3]])
    close(ret, [[1.5, 0.0, 1.0, 1.0]])


def test_gae_rejects_reward_on_injected_token():
    with pytest.raises(ValueError, match="outside the loss mask"):
        gae_over_policy_tokens(
            torch.tensor([[0.0, 1.0]]), torch.zeros(1, 2), torch.tensor([[1, 0]])
        )


def test_place_turn_rewards_on_last_policy_token_of_each_turn():
    index = torch.tensor([[-1, 0, 0, -1, 1, 1, -1], [0, 0, -1, -1, -1, -1, -1]])
    mask = torch.tensor([[0, 1, 1, 0, 1, 1, 0], [1, 1, 0, 0, 0, 0, 0]])
    rewards = place_turn_rewards([[0.5, 1.0], [2.0]], index, mask)
    close(rewards, [[0, 0, 0.5, 0, 0, 1.0, 0], [0, 2.0, 0, 0, 0, 0, 0]])
    with pytest.raises(ValueError, match="no policy token"):
        place_turn_rewards([[0.5, 1.0]], torch.tensor([[0, 0]]), torch.tensor([[1, 1]]))


def test_kl_in_reward_only_on_policy_tokens():
    out = kl_in_reward(
        torch.tensor([[0.0, 0.0, 1.0]]),
        torch.tensor([[0.5, 9.0, 0.2]]),
        0.1,
        torch.tensor([[1, 0, 1]]),
    )
    close(out, [[-0.05, 0.0, 0.98]])


def test_whiten_masked_mean_and_unbiased_var():
    x = torch.tensor([[1.0, 2.0, 100.0], [3.0, -50.0, 0.0]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    out = whiten(x, mask)  # masked values 1, 2, 3: mean 2, unbiased var 1
    close(out, [[-1.0, 0.0, 0.0], [1.0, 0.0, 0.0]], tol=1e-6)
    close(whiten(x, mask, shift_mean=False), [[1.0, 2.0, 0.0], [3.0, 0.0, 0.0]], tol=1e-6)
