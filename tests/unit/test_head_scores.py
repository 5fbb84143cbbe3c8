"""Chunked log-probs and entropies (`mua.train.head_scores`) equal the whole-logits computation,
values and gradients, and never hold logits for more than one chunk of tokens."""

from __future__ import annotations

import pytest
import torch

from mua.train.head_scores import head_scores
from mua.train.packed_batch import pack
from mua.train.packed_forward import packed_logits, scored_forward, scored_logprobs


def _whole_logits(hidden, weight, bias, targets, temperature):
    """The trainer's whole-logits path (`packed_logits`, then `scored_logprobs`), op for op."""
    logits = torch.nn.functional.linear(hidden, weight, bias).float()
    scaled = logits if temperature == 1.0 else logits / temperature
    logp_all = torch.log_softmax(scaled, dim=-1)
    picked = logp_all.gather(-1, targets[:, None]).squeeze(-1)
    return picked, -(logp_all.exp() * logp_all).sum(-1)


@pytest.mark.parametrize("temperature", [1.0, 0.7])
@pytest.mark.parametrize("with_bias", [False, True])
@pytest.mark.parametrize("chunk", [1, 7, 64])
@pytest.mark.parametrize("outputs", ["both", "logp", "entropy"])
def test_chunked_scores_and_gradients_equal_the_whole_computation(
    temperature, with_bias, chunk, outputs
):
    gen = torch.Generator().manual_seed(0)
    tokens, hidden_size, vocab = 23, 16, 50
    hidden = torch.randn(tokens, hidden_size, generator=gen, dtype=torch.float64) * 2
    weight = torch.randn(vocab, hidden_size, generator=gen, dtype=torch.float64)
    bias = torch.randn(vocab, generator=gen, dtype=torch.float64) if with_bias else None
    targets = torch.randint(0, vocab, (tokens,), generator=gen)
    g_logp = torch.randn(tokens, generator=gen, dtype=torch.float64)
    g_entropy = torch.randn(tokens, generator=gen, dtype=torch.float64)
    inputs = [t.requires_grad_(True) for t in (hidden, weight, bias) if t is not None]

    def run(fn, **kw):
        logp, entropy = fn(hidden, weight, bias, targets, temperature, **kw)
        # float64 inputs: F.linear in float64, then .float(): compare in float32
        terms = {
            "logp": (logp.double() * g_logp).sum(),
            "entropy": (entropy.double() * g_entropy).sum(),
        }
        loss = terms["logp"] + terms["entropy"] if outputs == "both" else terms[outputs]
        return logp, entropy, torch.autograd.grad(loss, inputs)

    want = run(_whole_logits)
    got = run(head_scores, chunk_tokens=chunk)
    assert torch.allclose(got[0], want[0], atol=1e-6) and torch.allclose(got[1], want[1], atol=1e-6)
    for g, w in zip(got[2], want[2], strict=True):
        assert torch.allclose(g, w, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("temperature", [1.0, 0.7])
@pytest.mark.parametrize("with_bias", [False, True])
@pytest.mark.parametrize("outputs", ["both", "logp", "entropy"])
def test_one_chunk_gradients_are_bit_identical_to_the_whole_logits_path(
    temperature, with_bias, outputs
):
    """In float32 with one chunk, the gradients of the hidden rows, the head's weight and its
    bias are exactly autograd's through whole logits (the same operations, the same rounding)."""
    torch.set_num_threads(1)
    gen = torch.Generator().manual_seed(6)
    tokens, hidden_size, vocab = 37, 24, 300
    hidden = torch.randn(tokens, hidden_size, generator=gen) * 2
    weight = torch.randn(vocab, hidden_size, generator=gen) * 0.5
    bias = torch.randn(vocab, generator=gen) if with_bias else None
    targets = torch.randint(0, vocab, (tokens,), generator=gen)
    g_logp, g_entropy = torch.randn(2, tokens, generator=gen)
    inputs = [t.requires_grad_(True) for t in (hidden, weight, bias) if t is not None]

    def run(fn, **kw):
        logp, entropy = fn(hidden, weight, bias, targets, temperature, **kw)
        loss = {
            "both": (logp * g_logp).sum() + (entropy * g_entropy).sum(),
            "logp": (logp * g_logp).sum(),
            "entropy": (entropy * g_entropy).sum(),
        }[outputs]
        return logp, entropy, torch.autograd.grad(loss, inputs)

    want = run(_whole_logits)
    got = run(head_scores, chunk_tokens=tokens)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    for g, w in zip(got[2], want[2], strict=True):
        assert torch.equal(g, w), (g - w).abs().max()


def test_only_the_used_output_gets_a_gradient_term():
    """A loss of the log-probs alone gets the log-probs' gradient (the entropy's is not added)."""
    gen = torch.Generator().manual_seed(1)
    hidden = torch.randn(9, 8, generator=gen, requires_grad=True)
    weight = torch.randn(30, 8, generator=gen, requires_grad=True)
    targets = torch.randint(0, 30, (9,), generator=gen)
    got = torch.autograd.grad(head_scores(hidden, weight, None, targets, 1.0, 4)[0].sum(), hidden)
    want = torch.autograd.grad(_whole_logits(hidden, weight, None, targets, 1.0)[0].sum(), hidden)
    assert torch.allclose(got[0], want[0], atol=1e-5)


def _whole_and_chunked(model, mb, entropy_grad):
    """(whole-logits run, chunked run) of one micro-batch: log-probs, entropies and every
    parameter's gradient of a loss of the log-probs, plus the entropies with `entropy_grad`."""

    def run(fn):
        model.zero_grad()
        logp, entropy = fn()
        loss = logp.sum() + 0.3 * logp.pow(2).sum() + (0.5 * entropy.sum() if entropy_grad else 0)
        loss.backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        return logp.detach(), entropy.detach(), grads

    whole = run(lambda: scored_logprobs(packed_logits(model, mb), mb, 0.8, entropy_grad))
    return whole, run(lambda: scored_forward(model, mb, 0.8, entropy_grad))


@pytest.mark.parametrize("entropy_grad", [False, True])
def test_scored_forward_equals_whole_logits_with_model_gradients(entropy_grad, monkeypatch):
    """Through a real model: the same log-probs, entropies and parameter gradients as the
    whole-logits path, with the head never run on more than a chunk of rows, and the backward
    recomputing entropies only when they have a gradient."""
    from mua.models import load_model
    from mua.train import head_scores as module

    torch.set_num_threads(1)
    model = load_model("tiny:qwen2-1m", dtype="float32", seed=0)
    gen = torch.Generator().manual_seed(3)
    seqs = [torch.randint(3, 2000, (n,), generator=gen).tolist() for n in (9, 14, 6)]
    masks = [[0] * 3 + [1] * 6, [1] * 14, [0, 0, 1, 1, 1, 0]]
    mb = pack(seqs, [0, 1, 2], masks=masks)
    monkeypatch.setattr(module, "CHUNK_BYTES", 4 * 2000 * 5)  # 5 tokens per chunk (vocab 2000)
    rows, with_entropy = [], []
    real_logits, real_scores = module._chunk_logits, module._chunk_scores
    monkeypatch.setattr(
        module, "_chunk_logits", lambda h, *a: rows.append(h.shape[0]) or real_logits(h, *a)
    )
    monkeypatch.setattr(
        module, "_chunk_scores", lambda *a: with_entropy.append(a[-1]) or real_scores(*a)
    )

    want, got = _whole_and_chunked(model, mb, entropy_grad)
    assert max(rows) == 5 and sum(rows) == 2 * int(mb.scored.numel())  # forward + backward
    backward_calls = with_entropy[len(with_entropy) // 2 :]
    assert backward_calls == [entropy_grad] * len(backward_calls)
    assert torch.allclose(got[0], want[0], atol=1e-5)
    assert torch.allclose(got[1], want[1], atol=1e-5)
    assert got[2].keys() == want[2].keys()
    for name, g in got[2].items():
        assert torch.allclose(g, want[2][name], atol=1e-5, rtol=1e-4), name


@pytest.mark.parametrize("entropy_grad", [False, True])
def test_scored_forward_in_one_chunk_is_bit_identical_to_whole_logits(entropy_grad):
    """With one chunk (a small vocabulary, as in the tiny models' runs), the chunked forward's
    log-probs, entropies and every parameter's gradient are exactly the whole-logits path's."""
    from mua.models import load_model

    torch.set_num_threads(1)
    model = load_model("tiny:qwen2-1m", dtype="float32", seed=0)
    gen = torch.Generator().manual_seed(7)
    seqs = [torch.randint(3, 2000, (n,), generator=gen).tolist() for n in (12, 7, 10)]
    masks = [[0] * 4 + [1] * 8, [1] * 7, [0, 0, 1, 1, 1, 1, 0, 1, 1, 0]]
    mb = pack(seqs, [0, 1, 2], masks=masks)

    want, got = _whole_and_chunked(model, mb, entropy_grad)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    assert got[2].keys() == want[2].keys()
    for name, g in got[2].items():
        assert torch.equal(g, want[2][name]), name


def test_bf16_head_gradient_is_summed_over_chunks_in_float32():
    """With many chunks in bf16 the head's gradient is as close to the float64 one as a single
    whole-logits matmul's (each chunk's part is rounded once, the sum is not)."""
    gen = torch.Generator().manual_seed(4)
    hidden = torch.randn(256, 32, generator=gen, dtype=torch.float64)
    weight = torch.randn(64, 32, generator=gen, dtype=torch.float64) * 0.3
    targets = torch.randint(0, 64, (256,), generator=gen)

    def head_grad(fn, dtype, **kw):
        w = weight.to(dtype).requires_grad_(True)
        logp, _ = fn(hidden.to(dtype), w, None, targets, 1.0, **kw)
        return torch.autograd.grad(logp.sum(), w)[0].double()

    exact = head_grad(_whole_logits, torch.float64)
    whole = (head_grad(_whole_logits, torch.bfloat16) - exact).abs().max()
    chunked = (head_grad(head_scores, torch.bfloat16, chunk_tokens=2) - exact).abs().max()
    assert chunked <= 2 * whole


def test_forward_only_returns_each_sequences_values_in_input_order():
    """Both outputs of `forward_only`: logits (no masks) and chunked scores (masks), split over
    several micro-batches and put back in the sequences' order."""
    from mua.models import load_model
    from mua.train.packed_forward import forward_only, token_logprobs

    torch.set_num_threads(1)
    model = load_model("tiny:qwen2-1m", dtype="float32", seed=0).eval()
    gen = torch.Generator().manual_seed(5)
    seqs = [torch.randint(3, 2000, (n,), generator=gen).tolist() for n in (9, 14, 6, 11)]
    masks = [[0] * 2 + [1] * (len(s) - 2) for s in seqs]

    def alone(seq):
        mb = pack([seq], [0])
        return token_logprobs(packed_logits(model, mb), mb.input_ids, mb.lengths, 0.9)

    want = [alone(s) for s in seqs]
    from_logits = forward_only(
        model,
        seqs,
        16,
        "cpu",
        lambda mb, logits: list(
            torch.split(token_logprobs(logits, mb.input_ids, mb.lengths, 0.9), mb.lengths)
        ),
    )
    scored = forward_only(
        model,
        seqs,
        16,
        "cpu",
        lambda mb, scores: list(torch.split(scores[0], mb.lengths)),
        masks=masks,
        temperature=0.9,
    )
    for w, a, b, m in zip(want, from_logits, scored, masks, strict=True):
        keep = torch.tensor(m, dtype=torch.bool)
        assert torch.allclose(a, w, atol=1e-5)
        assert torch.allclose(b[keep], w[keep], atol=1e-5) and torch.all(b[~keep] == 0)
