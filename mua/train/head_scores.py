"""Log-probs and entropies of the scored tokens, through the LM head in chunks of tokens.

`head_scores(hidden, weight, bias, targets, ...)` runs the head on `chunk_tokens` hidden states at
a time; a chunk's [chunk, V] logits live only while it is reduced to two numbers per token and are
recomputed in the backward (`_HeadScores`), so memory grows with K x hidden, never K x V.
`mua.train.packed_forward.scored_forward` puts it in place of a model's output layer. Gradients
come from autograd on the whole-logits operations (docs/training.md). Not here: the model's forward
(`mua.train.packed_forward`), the losses (`mua.algo`), fused GPU kernels.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.autograd.function import once_differentiable

# Bytes of one chunk's fp32 logits. Autograd's backward of a chunk holds about four such
# buffers at once, six when the entropy has a gradient too (the log-softmax and its exponential
# are saved, and each gets a gradient).
CHUNK_BYTES = 64 * 2**20


def chunk_tokens_for(vocab_size: int, chunk_bytes: int | None = None) -> int:
    """Tokens per chunk so that one chunk's fp32 logits take at most `chunk_bytes`
    (`CHUNK_BYTES` when not given)."""
    return max(1, (chunk_bytes or CHUNK_BYTES) // (4 * vocab_size))


def head_scores(
    hidden, weight, bias, targets, temperature: float = 1.0, chunk_tokens: int | None = None
):
    """(log-probs [K], entropies [K]) of `targets` [K] under softmax((hidden @ weight.T + bias)
    / temperature), hidden [K, H], weight [V, H], in float32, `chunk_tokens` rows at a time."""
    chunk = chunk_tokens or chunk_tokens_for(weight.shape[0])
    return _HeadScores.apply(hidden, weight, bias, targets, float(temperature), chunk)


def _chunk_logits(hidden, weight, bias, temperature: float):
    """The head's logits of a chunk, in float32, divided by the temperature: [C, V]."""
    z = F.linear(hidden, weight, bias).float()
    return z if temperature == 1.0 else z / temperature


def _chunk_scores(hidden, weight, bias, targets, temperature: float, logp: bool, entropy: bool):
    """(log-probs [C] or None, entropies [C] or None) of a chunk: the whole-logits path's
    operations, in its order, so that autograd differentiates them the same way."""
    logp_all = torch.log_softmax(_chunk_logits(hidden, weight, bias, temperature), dim=-1)
    picked = logp_all.gather(-1, targets[:, None]).squeeze(-1) if logp else None
    spread = -(logp_all.exp() * logp_all).sum(-1) if entropy else None
    return picked, spread


class _HeadScores(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden, weight, bias, targets, temperature, chunk):
        logps, entropies = [], []
        for start in range(0, hidden.shape[0], chunk):
            stop = start + chunk
            picked, spread = _chunk_scores(
                hidden[start:stop], weight, bias, targets[start:stop], temperature, True, True
            )
            logps.append(picked)
            entropies.append(spread)
        logp = torch.cat(logps) if logps else hidden.new_zeros(0, dtype=torch.float32)
        entropy = torch.cat(entropies) if entropies else logp.clone()
        ctx.save_for_backward(hidden, weight, bias, targets)
        ctx.temperature, ctx.chunk = temperature, chunk
        ctx.set_materialize_grads(False)
        return logp, entropy

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_logp, grad_entropy):
        hidden, weight, bias, targets = ctx.saved_tensors
        need_h, need_w, need_b = ctx.needs_input_grad[:3]
        need_b = need_b and bias is not None
        incoming = [g for g in (grad_logp, grad_entropy) if g is not None]
        if not incoming or hidden.shape[0] == 0:
            d_hidden = torch.zeros_like(hidden) if need_h else None
            d_weight = torch.zeros_like(weight) if need_w else None
            d_bias = torch.zeros_like(bias) if need_b else None
            return d_hidden, d_weight, d_bias, None, None, None
        wanted = (grad_logp is not None, grad_entropy is not None)  # (log-probs, entropies)
        d_hidden = torch.empty_like(hidden) if need_h else None
        # the head's gradients add up over chunks in float32 (in bf16 every chunk would round)
        d_weight = d_bias = None
        for start in range(0, hidden.shape[0], ctx.chunk):
            stop = min(start + ctx.chunk, hidden.shape[0])
            h = hidden[start:stop].detach().requires_grad_(need_h)
            w = weight.detach().requires_grad_(need_w)
            b = None if bias is None else bias.detach().requires_grad_(need_b)
            with torch.enable_grad():
                picked, spread = _chunk_scores(
                    h, w, b, targets[start:stop], ctx.temperature, *wanted
                )
            outputs = [o for o in (picked, spread) if o is not None]
            leaves = [t for t, need in ((h, need_h), (w, need_w), (b, need_b)) if need]
            grads = iter(torch.autograd.grad(outputs, leaves, [g[start:stop] for g in incoming]))
            if need_h:
                d_hidden[start:stop] = next(grads)
            if need_w:
                d_weight = _summed(d_weight, next(grads))
            if need_b:
                d_bias = _summed(d_bias, next(grads))
        return (
            d_hidden,
            None if d_weight is None else d_weight.to(weight.dtype),
            None if d_bias is None else d_bias.to(bias.dtype),
            None,
            None,
            None,
        )


def _summed(total, part):
    """`total + part` in float32, in place when `total` exists; `part` (a fresh gradient) is
    the float32 total itself when it is the first and already float32."""
    return part.float() if total is None else total.add_(part)
