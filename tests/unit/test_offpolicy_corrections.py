"""Off-policy corrections (docs/algorithms.md §11) against a plain float64 reference.

The reference is written with Python floats and `math`, one token at a time, straight from the
formulas in the docs; the library's tensors must match it, gradients included. A deliberately
wrong correction (the weight inverted, the decoupled cap truncating instead of dropping, IcePop
without its floor, sequence-level MIS per token) must not match, so the comparison can tell a broken correction from a right one.
"""

from __future__ import annotations

import math

import pytest
import torch

from mua.algo import behaviour_weights, policy_loss, sample_staleness

torch.set_num_threads(1)

GEN = torch.Generator().manual_seed(7)
N = 64
LOGP = -torch.rand(N, generator=GEN, dtype=torch.float64) * 3
PROX = LOGP + torch.randn(N, generator=GEN, dtype=torch.float64) * 0.3
BEHAV = PROX + torch.randn(N, generator=GEN, dtype=torch.float64) * 0.8
ADV = torch.randn(N, generator=GEN, dtype=torch.float64)
MASK = (torch.rand(N, generator=GEN) > 0.2).to(torch.float64)
CLIP_LOW, CLIP_HIGH, CAP, FLOOR = 0.2, 0.28, 2.0, 0.5
SEQ_INDEX = torch.arange(N) // 8  # 8 sequences of 8 tokens, for the sequence-level correction


def reference_weight(prox: float, behav: float, kind: str, cap: float) -> float:
    raw = math.exp(prox - behav)
    if kind == "none":
        return 1.0
    if kind == "tis":
        return min(raw, cap)
    if kind == "icepop":
        return raw if FLOOR <= raw <= cap else 0.0
    return raw if raw <= cap else 0.0


def reference_seq_weights() -> list[float]:
    """seq-mis: ρ = Π over the sequence's policy tokens of exp(prox − behav), kept if ≤ C."""
    out = []
    for i in range(N):
        seq = [j for j in range(N) if SEQ_INDEX[j] == SEQ_INDEX[i] and MASK[j]]
        rho = math.prod(math.exp(float(PROX[j]) - float(BEHAV[j])) for j in seq)
        out.append(rho if rho <= CAP and MASK[i] else 0.0)
    return out


def reference_token_loss(logp, prox, adv, w) -> tuple[float, float]:
    """(loss, d loss / d logp) of one policy token of weight w."""
    r = math.exp(logp - prox)
    unclipped = -adv * r
    clipped = -adv * min(max(r, 1 - CLIP_LOW), 1 + CLIP_HIGH)
    if unclipped >= clipped:
        return w * unclipped, w * unclipped  # d(−A·r)/dlogp = −A·r
    return w * clipped, 0.0


def library(kind: str):
    logp = LOGP.clone().requires_grad_(True)
    w, stats = behaviour_weights(PROX, BEHAV, MASK, kind, CAP, FLOOR, SEQ_INDEX)
    losses, _ = policy_loss(
        logp, PROX, ADV, MASK, clip_low=CLIP_LOW, clip_high=CLIP_HIGH, is_weights=w
    )
    losses.sum().backward()
    return losses.detach(), logp.grad, w, stats


def reference(kind: str):
    losses, grads, weights = [], [], []
    seq_weights = reference_seq_weights()
    for i in range(N):
        if not MASK[i]:
            losses.append(0.0)
            grads.append(0.0)
            weights.append(0.0)
            continue
        w = reference_weight(float(PROX[i]), float(BEHAV[i]), kind, CAP)
        w = seq_weights[i] if kind == "seq-mis" else w
        loss, grad = reference_token_loss(float(LOGP[i]), float(PROX[i]), float(ADV[i]), w)
        losses.append(loss)
        grads.append(grad)
        weights.append(w)
    t = lambda xs: torch.tensor(xs, dtype=torch.float64)  # noqa: E731
    return t(losses), t(grads), t(weights)


@pytest.mark.parametrize("kind", ["none", "tis", "decoupled", "icepop", "seq-mis"])
def test_corrected_loss_matches_the_float64_reference(kind):
    losses, grads, w, stats = library(kind)
    ref_losses, ref_grads, ref_w = reference(kind)
    torch.testing.assert_close(w, ref_w, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(losses, ref_losses, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(grads, ref_grads, rtol=1e-12, atol=1e-12)
    count = float(MASK.sum())
    assert float(stats["is_weight_mean"]) == pytest.approx(float(ref_w.sum()) / count)
    raw = torch.exp(PROX - BEHAV)
    over = float(((raw > CAP) & MASK.bool()).sum()) / count
    assert float(stats["is_truncated_frac"]) == pytest.approx(over)
    assert 0 < over < 1  # the fixed inputs exercise both sides of the cap
    dropped = sum(1 for i in range(N) if MASK[i] and ref_w[i] == 0) / count
    assert float(stats["is_masked_frac"]) == pytest.approx(dropped, abs=1e-12)
    assert (dropped == 0) == (kind in ("none", "tis"))


def test_each_band_edge_and_sequence_drops_what_its_definition_says():
    raw = torch.exp(PROX - BEHAV)
    below, above = (raw < FLOOR) & MASK.bool(), (raw > CAP) & MASK.bool()
    assert below.any() and above.any()  # icepop drops on both sides of its band
    _, _, w, _ = library("icepop")
    assert torch.all(w[below | above] == 0) and torch.all(w[MASK.bool() & ~below & ~above] > 0)
    _, _, w, _ = library("seq-mis")
    kept = {int(SEQ_INDEX[i]) for i in range(N) if w[i] > 0}
    assert 0 < len(kept) < 8  # some sequences leave the loss whole, others stay
    for i in range(N):  # one weight per sequence
        if MASK[i] and int(SEQ_INDEX[i]) in kept:
            assert float(w[i]) == pytest.approx(float(w[SEQ_INDEX == SEQ_INDEX[i]].max()))


def test_no_correction_is_todays_loss_exactly():
    logp = LOGP.clone()
    plain, _ = policy_loss(logp, PROX, ADV, MASK, clip_low=CLIP_LOW, clip_high=CLIP_HIGH)
    w, _ = behaviour_weights(PROX, BEHAV, MASK, "none", CAP)
    weighted, _ = policy_loss(
        logp, PROX, ADV, MASK, clip_low=CLIP_LOW, clip_high=CLIP_HIGH, is_weights=w
    )
    assert torch.equal(plain, weighted)


def test_a_wrong_correction_does_not_pass_the_reference_check():
    ref_losses, _, _ = reference("tis")
    # wrong 1: the importance weight inverted (behaviour over proximal)
    logp = LOGP.clone()
    inverted, _ = behaviour_weights(BEHAV, PROX, MASK, "tis", CAP)
    wrong, _ = policy_loss(
        logp, PROX, ADV, MASK, clip_low=CLIP_LOW, clip_high=CLIP_HIGH, is_weights=inverted
    )
    with pytest.raises(AssertionError):
        torch.testing.assert_close(wrong, ref_losses, rtol=1e-6, atol=1e-6)
    # wrong 2: decoupled PPO truncating at the cap instead of dropping the token
    decoupled_ref, _, _ = reference("decoupled")
    truncated, _, _, _ = library("tis")
    with pytest.raises(AssertionError):
        torch.testing.assert_close(truncated, decoupled_ref, rtol=1e-6, atol=1e-6)
    # wrong 3: IcePop without its floor (decoupled's one-sided cap)
    icepop_ref, _, _ = reference("icepop")
    with pytest.raises(AssertionError):
        torch.testing.assert_close(decoupled_ref, icepop_ref, rtol=1e-6, atol=1e-6)
    # wrong 4: sequence-level MIS applied per token (token-level MIS is decoupled's weight)
    seq_ref, _, _ = reference("seq-mis")
    with pytest.raises(AssertionError):
        torch.testing.assert_close(decoupled_ref, seq_ref, rtol=1e-6, atol=1e-6)


def test_weights_are_constants_and_zero_off_mask():
    prox = PROX.clone().requires_grad_(True)
    w, _ = behaviour_weights(prox, BEHAV, MASK, "tis", CAP)
    assert not w.requires_grad
    assert torch.all(w[MASK == 0] == 0)


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="off-policy correction 'nope'"):
        behaviour_weights(PROX, BEHAV, MASK, "nope", CAP)
    with pytest.raises(ValueError, match="cap must be > 1"):
        behaviour_weights(PROX, BEHAV, MASK, "tis", 1.0)
    with pytest.raises(ValueError, match=r"floor must be in \(0, 1\)"):
        behaviour_weights(PROX, BEHAV, MASK, "icepop", CAP, 1.5)


def test_sample_staleness_counts_the_oldest_policy_token():
    assert sample_staleness(5, [3, 3, 4, 5, 5], [0, 1, 1, 0, 1]) == 2  # token 0 is a prompt token
    assert sample_staleness(5, [5, 5], [1, 1]) == 0
    assert sample_staleness(5, [1, 2], [0, 0]) == 0
