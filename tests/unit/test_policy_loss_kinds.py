"""GSPO, GSPO-token and CISPO (docs/algorithms.md §5) against a plain float64 reference.

The reference is written with Python floats and `math`, sequence by sequence and token by token,
straight from the formulas in the docs: the aggregated loss and its gradient with respect to every
log-prob must match it. Deliberately wrong variants (GSPO's ratio from the summed instead of the
mean log-ratio, CISPO's weight left with a gradient) must not, so the comparison tells them apart.
The recipe refuses the combinations the docs call meaningless, each in one line.
"""

from __future__ import annotations

import math

import pytest
import torch

from mua.algo import aggregate, policy_loss

torch.set_num_threads(1)

GEN = torch.Generator().manual_seed(11)
B, L = 12, 7
OLD = -torch.rand(B, L, generator=GEN, dtype=torch.float64) * 3
LOGP = OLD + torch.randn(B, L, generator=GEN, dtype=torch.float64) * 0.08
ADV = torch.randn(B, L, generator=GEN, dtype=torch.float64)  # token advantages differ in a row
MASK = (torch.rand(B, L, generator=GEN) > 0.3).to(torch.float64)
MASK[3] = 0.0  # a sequence without policy tokens counts for nothing
CLIP_LOW, CLIP_HIGH = 0.03, 0.04


def _rows():
    """Per sequence with policy tokens: (positions, logp, old, adv) as Python floats."""
    out = []
    for b in range(B):
        pos = [t for t in range(L) if MASK[b, t]]
        if pos:
            out.append((b, pos, *([float(x[b, t]) for t in pos] for x in (LOGP, OLD, ADV))))
    return out


def _clip(x: float) -> float:
    return min(max(x, 1 - CLIP_LOW), 1 + CLIP_HIGH)


def reference_gspo(token_level: bool) -> tuple[float, torch.Tensor, float]:
    """(seq-mean-token-mean loss, d loss / d logp, clipped token fraction) of gspo/gspo-token."""
    rows = _rows()
    grad = torch.zeros(B, L, dtype=torch.float64)
    loss, clipped_tokens = 0.0, 0
    for b, pos, logp, old, adv in rows:
        n = len(pos)
        s = math.exp(sum(lp - o for lp, o in zip(logp, old)) / n)
        seq_adv = sum(adv) / n
        for i, t in enumerate(pos):
            a = adv[i] if token_level else seq_adv
            unclipped, clipped = -a * s, -a * _clip(s)
            loss += max(unclipped, clipped) / n / len(rows)
            clipped_tokens += clipped > unclipped
            if unclipped >= clipped:
                # gspo: d s/d logp_t = s/n for the sequence loss, every token of the row;
                # gspo-token: d (sg(s)·π_t/sg(π_t))/d logp_t = s for the token's own term
                grad[b, t] = (-seq_adv * s if not token_level else -a * s) / n / len(rows)
    return loss, grad, clipped_tokens / float(MASK.sum())


def reference_cispo(mode: str) -> tuple[float, torch.Tensor, float]:
    """(loss, d loss / d logp, clipped token fraction) of cispo under `mode` aggregation."""
    rows = _rows()
    tokens = sum(len(pos) for _, pos, *_ in rows)
    grad = torch.zeros(B, L, dtype=torch.float64)
    loss, clipped_tokens = 0.0, 0
    for b, pos, logp, old, adv in rows:
        norm = tokens if mode == "token-mean" else len(rows)
        for i, t in enumerate(pos):
            r = math.exp(logp[i] - old[i])
            w = _clip(r)
            clipped_tokens += w != r
            loss += -w * adv[i] * logp[i] / norm
            grad[b, t] = -w * adv[i] / norm
    return loss, grad, clipped_tokens / tokens


def library(kind: str, mode: str, seq_index=None, layout=(B, L)):
    logp = LOGP.reshape(layout).clone().requires_grad_(True)
    args = (OLD.reshape(layout), ADV.reshape(layout), MASK.reshape(layout))
    losses, stats = policy_loss(
        logp, *args, clip_low=CLIP_LOW, clip_high=CLIP_HIGH, kind=kind, seq_index=seq_index
    )
    loss = aggregate(losses, MASK.reshape(layout), mode, seq_index=seq_index)
    loss.backward()
    return float(loss.detach()), logp.grad.reshape(B, L), stats


@pytest.mark.parametrize("kind", ["gspo", "gspo-token"])
def test_gspo_matches_the_float64_reference(kind):
    want_loss, want_grad, want_frac = reference_gspo(token_level=kind == "gspo-token")
    loss, grad, stats = library(kind, "seq-mean-token-mean")
    assert loss == pytest.approx(want_loss, rel=1e-9, abs=1e-12)
    torch.testing.assert_close(grad, want_grad, rtol=1e-9, atol=1e-12)
    assert float(stats["clip_frac"]) == pytest.approx(want_frac, abs=1e-12)
    assert 0.1 < want_frac < 0.9  # the fixed inputs clip some sequences and leave others


@pytest.mark.parametrize("kind", ["gspo", "gspo-token"])
def test_gspo_on_packed_rows_equals_the_padded_layout(kind):
    want_loss, want_grad, _ = reference_gspo(token_level=kind == "gspo-token")
    seq_index = torch.arange(B).repeat_interleave(L)
    loss, grad, _ = library(kind, "seq-mean-token-mean", seq_index=seq_index, layout=(B * L,))
    assert loss == pytest.approx(want_loss, rel=1e-9, abs=1e-12)
    torch.testing.assert_close(grad, want_grad, rtol=1e-9, atol=1e-12)


def test_gspo_token_with_a_sequence_advantage_has_gspos_gradient():
    seq_adv = (ADV * MASK).sum(1, keepdim=True) / MASK.sum(1, keepdim=True).clamp(min=1)
    grads = []
    for kind in ("gspo", "gspo-token"):
        logp = LOGP.clone().requires_grad_(True)
        losses, _ = policy_loss(
            logp, OLD, seq_adv.expand(B, L), MASK, CLIP_LOW, CLIP_HIGH, kind=kind
        )
        aggregate(losses, MASK, "seq-mean-token-mean").backward()
        grads.append(logp.grad)
    torch.testing.assert_close(grads[0], grads[1], rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-sum"])
def test_cispo_matches_the_float64_reference(mode):
    want_loss, want_grad, want_frac = reference_cispo(mode)
    loss, grad, stats = library("cispo", mode)
    assert loss == pytest.approx(want_loss, rel=1e-9, abs=1e-12)
    torch.testing.assert_close(grad, want_grad, rtol=1e-9, atol=1e-12)
    assert float(stats["clip_frac"]) == pytest.approx(want_frac, abs=1e-12)
    assert 0.1 < want_frac < 0.9
    # every token keeps a gradient, the clipped ones included (PPO's clip would zero them)
    assert bool((grad[MASK.bool() & (ADV != 0)] != 0).all())


def test_wrong_variants_do_not_pass_the_reference_check():
    want_loss, _, _ = reference_gspo(token_level=False)
    # GSPO's ratio from the summed log-ratio (not length-normalised)
    seq_adv = (ADV * MASK).sum(1) / MASK.sum(1).clamp(min=1)
    s = torch.exp(((LOGP - OLD) * MASK).sum(1))
    per_seq = torch.maximum(-seq_adv * s, -seq_adv * s.clamp(1 - CLIP_LOW, 1 + CLIP_HIGH))
    wrong = float(per_seq[MASK.sum(1) > 0].mean())
    assert abs(wrong - want_loss) > 1e-3
    # PPO's token ratio instead of the sequence's
    loss, _, _ = library("ppo-clip", "seq-mean-token-mean")
    assert abs(loss - want_loss) > 1e-3
    # CISPO with its weight left differentiable: the plain clipped-ratio gradient differs
    _, want_grad, _ = reference_cispo("token-mean")
    logp = LOGP.clone().requires_grad_(True)
    ratio = torch.exp(logp - OLD).clamp(1 - CLIP_LOW, 1 + CLIP_HIGH)
    aggregate(-ratio * ADV * logp, MASK, "token-mean").backward()
    with pytest.raises(AssertionError):
        torch.testing.assert_close(logp.grad, want_grad, rtol=1e-6, atol=1e-6)


def test_ppo_clip_is_the_default_kind():
    plain, _ = policy_loss(LOGP, OLD, ADV, MASK, CLIP_LOW, CLIP_HIGH)
    named, _ = policy_loss(LOGP, OLD, ADV, MASK, CLIP_LOW, CLIP_HIGH, kind="ppo-clip")
    assert torch.equal(plain, named)


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="policy loss kind 'ppo'"):
        policy_loss(LOGP, OLD, ADV, MASK, kind="ppo")
    with pytest.raises(ValueError, match="dual_clip applies to the ppo-clip loss only"):
        policy_loss(LOGP, OLD, ADV, MASK, dual_clip=3.0, kind="cispo")
