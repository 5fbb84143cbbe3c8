"""Log-probs and entropies of the scored tokens, through the LM head in chunks of tokens.

The loss needs, for each of the K scored tokens, log_softmax(logits / T) of that token and the
entropy of its distribution. Computed from whole logits that is several fp32 [K, V] tensors alive
at once (the logits, the log-softmax, its exponential and their gradients): for a 16k-token
conversation and a 151,936-token vocabulary about 10 GB each. Here the LM head runs on
`chunk_tokens` hidden states at a time; a chunk's [chunk, V] logits live only while that chunk is
reduced to two numbers per token and are recomputed in the backward (`_HeadScores`, a custom
autograd Function), so memory grows with K x hidden, never with K x V.

`head_scores(hidden, weight, bias, targets, ...)` is that computation on the head's weight;
`mua.train.packed_forward.scored_forward` puts it in the place of a model's output layer for one
forward.

Gradients (z = logits / T, p = softmax(z), H the entropy, g the incoming gradients):
    d z = g_logp * (onehot(target) - p) - g_H * p * (log p + H)
Not here: the model's forward (`mua.train.packed_forward`), the losses (`mua.algo`), fused GPU
kernels.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.autograd.function import once_differentiable

# Bytes of one chunk's fp32 logits; the backward holds about three such buffers at once.
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


class _HeadScores(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden, weight, bias, targets, temperature, chunk):
        logps, entropies = [], []
        for start in range(0, hidden.shape[0], chunk):
            z = _chunk_logits(hidden[start : start + chunk], weight, bias, temperature)
            logp_all = torch.log_softmax(z, dim=-1)  # [C, V]
            picked = logp_all.gather(-1, targets[start : start + chunk, None]).squeeze(-1)
            logps.append(picked)
            entropies.append(-(logp_all.exp() * logp_all).sum(-1))
            del z, logp_all
        logp = torch.cat(logps) if logps else hidden.new_zeros(0, dtype=torch.float32)
        entropy = torch.cat(entropies) if entropies else logp.clone()
        ctx.save_for_backward(hidden, weight, bias, targets, entropy)
        ctx.temperature, ctx.chunk = temperature, chunk
        ctx.set_materialize_grads(False)
        return logp, entropy

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_logp, grad_entropy):
        hidden, weight, bias, targets, entropy = ctx.saved_tensors
        need_h, need_w, need_b = ctx.needs_input_grad[:3]
        d_hidden = torch.empty_like(hidden) if need_h else None
        # the head's gradients add up over chunks in float32 (in bf16 every chunk would round)
        d_weight = torch.zeros_like(weight, dtype=torch.float32) if need_w else None
        d_bias = (
            torch.zeros_like(bias, dtype=torch.float32) if need_b and bias is not None else None
        )

        def as_param(grad, like):
            return None if grad is None else grad.to(like.dtype)

        if grad_logp is None and grad_entropy is None:
            d_hidden = d_hidden.zero_() if need_h else None
            return d_hidden, as_param(d_weight, weight), as_param(d_bias, bias), None, None, None
        temperature = ctx.temperature
        for start in range(0, hidden.shape[0], ctx.chunk):
            stop = min(start + ctx.chunk, hidden.shape[0])
            h = hidden[start:stop]
            z = _chunk_logits(h, weight, bias, temperature)
            logp_all = torch.log_softmax(z, dim=-1)
            del z
            p = logp_all.exp()  # [C, V]
            if grad_entropy is not None:  # -g_H * p * (log p + H)
                logp_all.add_(entropy[start:stop, None]).mul_(grad_entropy[start:stop, None])
                d_z = logp_all.mul_(p).neg_()
            else:
                d_z = torch.zeros_like(p)
            del logp_all
            if grad_logp is not None:  # g_logp * (onehot - p)
                g = grad_logp[start:stop, None]
                d_z.addcmul_(p, g, value=-1.0)
                d_z.scatter_add_(-1, targets[start:stop, None], g)
            del p
            if temperature != 1.0:
                d_z.div_(temperature)
            d_logits = d_z.to(hidden.dtype)
            del d_z
            if need_h:
                torch.mm(d_logits, weight, out=d_hidden[start:stop])
            if need_w and d_logits.dtype == torch.float32:
                d_weight.addmm_(d_logits.t(), h)
            elif need_w:
                d_weight.add_(torch.mm(d_logits.t(), h))
            if d_bias is not None:
                d_bias.add_(d_logits.sum(0))
        return d_hidden, as_param(d_weight, weight), as_param(d_bias, bias), None, None, None
