"""Policy/value losses, entropy, KL estimators and aggregation (§4-§6) against hand values.

The aggregation tests check the contract the trainer relies on: partial losses of micro-batches
(and of ranks) built with global counts sum to the full mini-batch loss, in all four modes.
"""

from __future__ import annotations

import math
from functools import partial

import pytest
import torch

from mua.algo import (
    AGGREGATIONS,
    aggregate,
    entropy_from_logits,
    kl_penalty,
    loss_normalizers,
    policy_loss,
    token_log_probs,
    value_loss,
)
from tests.unit.algo_asserts import assert_close

torch.set_num_threads(1)


close = partial(assert_close, tol=1e-5)


RATIOS = torch.tensor([1.5, 0.5, 1.5, 0.5, 4.0, 1.0])
ADVS = torch.tensor([1.0, 1.0, -1.0, -1.0, -1.0, 5.0])
MASK = torch.tensor([1, 1, 1, 1, 1, 0])


def run_policy_loss(**kwargs):
    logp = RATIOS.log().clone().requires_grad_(True)
    losses, stats = policy_loss(logp, torch.zeros(6), ADVS, MASK, **kwargs)
    return logp, losses, stats


def test_policy_loss_clipping_cases():
    logp, losses, stats = run_policy_loss(clip_low=0.2, clip_high=0.2)
    # A>0 r=1.5 -> clipped 1.2; A>0 r=.5 -> .5; A<0 r=1.5 -> 1.5; A<0 r=.5 -> clipped .8; A<0 r=4 -> 4
    close(losses, [-1.2, -0.5, 1.5, 0.8, 4.0, 0.0])
    close(stats["clip_frac"], 0.4)
    close(stats["dual_clip_frac"], 0.0)
    close(stats["tokens"], 5)
    close(stats["ratio_mean"], (1.5 + 0.5 + 1.5 + 0.5 + 4.0) / 5)
    losses.sum().backward()
    # d(−A·r)/dlogp = −A·r where unclipped, 0 where the clipped term wins or masked
    close(logp.grad, [0.0, -0.5, 1.5, 0.0, 4.0, 0.0])


def test_policy_loss_asymmetric_clip_and_dual_clip():
    _, losses, stats = run_policy_loss(clip_low=0.2, clip_high=0.28, dual_clip=3.0)
    close(losses, [-1.28, -0.5, 1.5, 0.8, 3.0, 0.0])  # dual clip caps −A·r at −c·A = 3
    close(stats["dual_clip_frac"], 0.2)
    with pytest.raises(ValueError, match="dual_clip"):
        run_policy_loss(dual_clip=1.0)


def test_policy_loss_entropy_bonus_and_kl_term():
    entropy = torch.full((6,), 2.0)
    kl = torch.full((6,), 0.5)
    _, losses, stats = run_policy_loss(entropy=entropy, entropy_coef=0.1, kl=kl, kl_coef=0.2)
    close(losses, [-1.2 - 0.2 + 0.1, -0.5 - 0.1, 1.5 - 0.1, 0.8 - 0.1, 4.0 - 0.1, 0.0])
    close(stats["entropy"], 2.0)
    close(stats["kl"], 0.5)


def test_value_loss_clipped():
    values = torch.tensor([1.0, 0.6, 0.3, 7.0], requires_grad=True)
    old = torch.tensor([0.5, 1.0, 0.3, 0.0])
    returns = torch.tensor([0.0, 0.0, 1.0, 0.0])
    mask = torch.tensor([1, 1, 1, 0])
    losses, stats = value_loss(values, old, returns, mask, clip=0.2)
    # V=1 (clip .7): max(1, .49)=1; V=.6 (clip .8): max(.36, .64)=.64; V=.3 unclipped: .49
    close(losses, [0.5, 0.32, 0.245, 0.0])
    close(stats["vf_clip_frac"], 1 / 3)
    losses.sum().backward()
    close(values.grad, [1.0, 0.0, -0.7, 0.0])  # clipped branch has no gradient w.r.t. V


def test_kl_estimators_by_hand():
    logp, ref = torch.tensor([math.log(0.5)]), torch.tensor([math.log(0.25)])
    d = math.log(2.0)
    close(kl_penalty(logp, ref, "k1"), [d])
    close(kl_penalty(logp, ref, "k2"), [0.5 * d * d])
    close(kl_penalty(logp, ref, "k3"), [0.5 + d - 1])


def test_k3_is_clamped_and_nonnegative():
    close(kl_penalty(torch.tensor([0.0]), torch.tensor([20.0]), "k3"), [10.0])
    torch.manual_seed(0)
    a, b = torch.randn(100), torch.randn(100)
    assert (kl_penalty(a, b, "k3") >= 0).all()
    with pytest.raises(ValueError, match="unknown kl estimator"):
        kl_penalty(a, b, "k4")


def test_entropy_and_token_log_probs():
    logits = torch.tensor([[0.0, 0.0, 0.0, 0.0], [50.0, 0.0, 0.0, 0.0], [1.0, 2.0, 3.0, 0.5]])
    ent = entropy_from_logits(logits)
    close(ent[:2], [math.log(4), 0.0])
    close(ent[2], torch.distributions.Categorical(logits=logits[2]).entropy())
    targets = torch.tensor([1, 0, 2])
    close(token_log_probs(logits, targets), torch.log_softmax(logits, -1)[torch.arange(3), targets])
    close(
        token_log_probs(logits.bfloat16(), targets),
        torch.log_softmax(logits, -1)[torch.arange(3), targets],
        tol=0.05,
    )


def test_aggregate_modes_by_hand():
    losses = torch.tensor([[1.0, 2.0, 3.0], [4.0, 9.0, 9.0], [7.0, 7.0, 7.0]])
    mask = torch.tensor([[1, 1, 1], [1, 0, 0], [0, 0, 0]])  # third sequence has no policy token
    close(aggregate(losses, mask, "token-mean"), 2.5)
    close(aggregate(losses, mask, "seq-mean-token-sum"), 5.0)
    close(aggregate(losses, mask, "seq-mean-token-mean"), 3.0)
    close(aggregate(losses, mask, "seq-mean-token-sum-norm", norm_length=10), 0.5)
    assert loss_normalizers(mask) == (4, 2)
    with pytest.raises(ValueError, match="norm_length"):
        aggregate(losses, mask, "seq-mean-token-sum-norm")
    with pytest.raises(ValueError, match="unknown loss aggregation"):
        aggregate(losses, mask, "sum")


def random_batch(seed: int):
    gen = torch.Generator().manual_seed(seed)
    lengths = [5, 3, 8, 1, 6, 4, 7]
    width = max(lengths)
    losses = torch.randn(len(lengths), width, generator=gen)
    mask = torch.zeros(len(lengths), width, dtype=torch.long)
    for b, n in enumerate(lengths):
        mask[b, :n] = (torch.rand(n, generator=gen) > 0.3).long()
    mask[3] = 0  # a sequence with no policy token
    return losses, mask


def pack(losses, mask, rows):
    """Pack rows (unpadded) into one 1-D micro-batch with a local seq_index."""
    parts, masks, ids = [], [], []
    for local, b in enumerate(rows):
        n = int(mask[b].nonzero().max()) + 1 if mask[b].any() else 2
        parts.append(losses[b, :n])
        masks.append(mask[b, :n])
        ids.append(torch.full((n,), local))
    return torch.cat(parts), torch.cat(masks), torch.cat(ids)


@pytest.mark.parametrize("mode", AGGREGATIONS)
def test_partial_losses_sum_to_full_batch_loss(mode):
    losses, mask = random_batch(1)
    full_param = losses.clone().requires_grad_(True)
    full = aggregate(full_param, mask, mode, norm_length=16)
    full.backward()

    # two "ranks", each with its own micro-batches: padded rows on rank 0, packed 1-D on rank 1
    rank_microbatches = [[[0, 1], [2]], [[3, 4, 5], [6]]]
    token_count = seq_count = 0
    for micro_batches in rank_microbatches:
        for rows in micro_batches:
            t, s = loss_normalizers(mask[rows])
            token_count, seq_count = token_count + t, seq_count + s
    assert (token_count, seq_count) == loss_normalizers(mask)

    split_param = losses.clone().requires_grad_(True)
    total = 0.0
    for rows in rank_microbatches[0]:
        total = total + aggregate(
            split_param[rows],
            mask[rows],
            mode,
            norm_length=16,
            global_token_count=token_count,
            global_seq_count=seq_count,
        )
    for rows in rank_microbatches[1]:
        packed_losses, packed_mask, seq_index = pack(split_param, mask, rows)
        assert loss_normalizers(packed_mask, seq_index)[1] == loss_normalizers(mask[rows])[1]
        total = total + aggregate(
            packed_losses,
            packed_mask,
            mode,
            norm_length=16,
            global_token_count=token_count,
            global_seq_count=seq_count,
            seq_index=seq_index,
        )
    total.backward()
    close(total, full, tol=1e-5)
    close(split_param.grad, full_param.grad, tol=1e-6)


def test_local_counts_differ_from_global_ones():
    """Without global counts each micro-batch normalises by itself: the sum is NOT the full loss."""
    losses, mask = random_batch(2)
    full = aggregate(losses, mask, "token-mean")
    naive = aggregate(losses[:2], mask[:2], "token-mean") + aggregate(
        losses[2:], mask[2:], "token-mean"
    )
    assert not torch.isclose(full, naive)
