"""The trainer's attention over a packed row on CPU: batched matmuls with a hand-written backward.

`matmul_attention(query, key, value, plan, scaling)` attends every batch of a `mua.train.varlen`
plan with two batched matmuls and returns [1, T, H, D] in row order. Each batch's queries, keys
and values are gathered from the row with one `index_select` each, straight into the layout the
matmuls read ([n * Hkv, H / Hkv * Qw, D]: each kv head's query heads stacked as rows, so no key
or value is repeated per query head), and the outputs of all batches land in one buffer that one
more `index_select` puts back in row order.

The backward is written out (softmax backward, four batched matmuls per batch, and one
`index_add_` per input into a single zeroed gradient) instead of being left to autograd, which
records about thirty operations per layer for the gathers, views and copies around the matmuls,
each with its own zero-filled buffer. Outputs and gradients equal each segment attended alone
through autograd, to float32 rounding (tested). Only on CPU: GPUs attend through
scaled_dot_product_attention or flash-attn (`mua.train.varlen`).

Padded query positions read a zero gradient (a sentinel row past the last token), so they add
exact zeros to the gradients of the token they point at; masked keys get zero probability, so
they add nothing either. Not here: the plan (`mua.train.varlen`), dropout and GPUs (those use
scaled_dot_product_attention), double backward (not supported).
"""

from __future__ import annotations

import torch
from torch.autograd.function import once_differentiable


def matmul_attention(query, key, value, plan, scaling) -> torch.Tensor:
    """query [1, H, T, D], key/value [1, Hkv, T, D] -> [1, T, H, D], in row order."""
    dim = query.shape[-1]
    scale = dim**-0.5 if scaling is None else scaling
    return _MatmulAttention.apply(query, key, value, plan, scale)


def _rows(x) -> torch.Tensor:
    """[1, heads, T, D] -> [T * heads, D]: token t's head h at row t * heads + h (a view for
    transformers' layout, where the heads are a transposed view of [T, heads, D])."""
    _, heads, tokens, dim = x.shape
    return x[0].transpose(0, 1).reshape(tokens * heads, dim)


class _MatmulAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, query, key, value, plan, scale):
        _, heads, tokens, dim = query.shape
        kv_heads = key.shape[1]
        groups = heads // kv_heads
        q_rows, k_rows, v_rows = _rows(query), _rows(key), _rows(value)
        outputs = q_rows.new_empty(plan.padded_queries * heads, dim)
        indices, saved, offset = [], [], 0
        for batch in plan.batches:
            index = batch.flat_index(heads, kv_heads, tokens, query.device)
            n, width = batch.size, batch.q_width
            q = q_rows.index_select(0, index.queries).view(n * kv_heads, groups * width, dim)
            k = k_rows.index_select(0, index.keys).view(n * kv_heads, batch.k_width, dim)
            v = v_rows.index_select(0, index.keys).view(n * kv_heads, batch.k_width, dim)
            additive = batch.additive_mask(kv_heads, groups, q.dtype, q.device)
            probs = torch.baddbmm(additive, q, k.transpose(1, 2), alpha=scale).softmax(-1)
            size = n * heads * width
            torch.bmm(probs, v, out=outputs[offset : offset + size].view(q.shape))
            offset += size
            indices.append(index)
            saved += [q, k, v, probs]
        ctx.save_for_backward(*saved)  # through saved-tensor hooks (activation checkpointing)
        ctx.indices, ctx.scale = indices, scale
        ctx.shapes = (heads, kv_heads, tokens, dim)
        out = outputs.index_select(0, plan.output_rows(heads, query.device))
        return out.view(1, tokens, heads, dim)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        heads, kv_heads, tokens, dim = ctx.shapes
        # a zero row after the last token: what padded query positions read
        grad_rows = torch.cat((grad.reshape(tokens * heads, dim), grad.new_zeros(1, dim)))
        dq = grad.new_zeros(tokens * heads, dim)
        dk = grad.new_zeros(tokens * kv_heads, dim)
        dv = grad.new_zeros(tokens * kv_heads, dim)
        saved = ctx.saved_tensors
        for i, index in enumerate(ctx.indices):
            q, k, v, probs = saved[4 * i : 4 * i + 4]
            d_out = grad_rows.index_select(0, index.grad_queries).view(q.shape)
            dv.index_add_(0, index.keys, torch.bmm(probs.transpose(1, 2), d_out).view(-1, dim))
            d_probs = torch.bmm(d_out, v.transpose(1, 2))
            # softmax backward: probs * (d_probs - sum(d_probs * probs)), times the scale
            row_dot = (d_probs * probs).sum(-1, keepdim=True)
            d_scores = d_probs.sub_(row_dot).mul_(probs).mul_(ctx.scale)
            dq.index_add_(0, index.queries, torch.bmm(d_scores, k).view(-1, dim))
            dk.index_add_(0, index.keys, torch.bmm(d_scores.transpose(1, 2), q).view(-1, dim))

        def as_input(rows, count):  # [T * count, D] -> [1, count, T, D]
            return rows.view(tokens, count, dim).transpose(0, 1)[None]

        return as_input(dq, heads), as_input(dk, kv_heads), as_input(dv, kv_heads), None, None
