"""Attention over the trainer's packed rows (`mua_varlen`) where flash-attn is not used (CPU, GPU).

Registered with transformers' AttentionInterface (no mask function, so no mask is built), it
attends each segment of a row (`cu_seq_lens_q`) to itself only, or to a prefix segment and then
itself (`mua_segment_prefix`); segments of similar shape share one call (docs/training.md,
"Packed batches, attention and norms"). Without `cu_seq_lens_q` each batch row is one causal
sequence; padded batches must not be sent here. Not here: packing, flash-attn, sliding-window
layers (`enable_varlen` leaves such models alone), double backward.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch.autograd.function import once_differentiable

NAME = "mua_varlen"
_registered = False


def varlen_attention(
    module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs
) -> tuple[torch.Tensor, None]:
    """query [B, H, T, D], key/value [B, Hkv, T, D] -> ([B, T, H, D], None)."""
    if kwargs.get("sliding_window") is not None:
        raise ValueError("mua_varlen attention does not support sliding-window layers")
    cu = kwargs.get("cu_seq_lens_q")
    gqa = key.shape[1] != query.shape[1]
    if cu is None:
        out = F.scaled_dot_product_attention(
            query, key, value, is_causal=True, scale=scaling, dropout_p=dropout, enable_gqa=gqa
        )
        return out.transpose(1, 2).contiguous(), None
    plan = _plan_for(cu, kwargs.get("mua_segment_prefix"), query.device)
    if _use_matmul(plan, query, dropout):
        return matmul_attention(query, key, value, plan, scaling), None
    # [1, H, T, D] -> [H, T, D]: each batch gathers its tokens along T (backward: index_add)
    q_all, k_all, v_all = query[0], key[0], value[0]
    parts = []
    for b in plan.batches:
        q = q_all.index_select(1, b.q_index).unflatten(1, (b.size, b.q_width)).transpose(0, 1)
        k = k_all.index_select(1, b.k_index).unflatten(1, (b.size, b.k_width)).transpose(0, 1)
        v = v_all.index_select(1, b.k_index).unflatten(1, (b.size, b.k_width)).transpose(0, 1)
        out = F.scaled_dot_product_attention(
            q,
            k,
            v,
            attn_mask=b.mask,
            is_causal=b.mask is None,
            scale=scaling,
            dropout_p=dropout,
            enable_gqa=gqa,
        )  # [n, H, Qw, D]
        parts.append(out.transpose(1, 2).flatten(0, 1))  # [n * Qw, H, D]
    out = parts[0] if len(parts) == 1 else torch.cat(parts)
    return out.index_select(0, plan.rows)[None], None  # [1, T, H, D], in row order


# Largest score matrix (elements) of a batch attended with batched matmuls on CPU
# (`matmul_attention`); a plan with a larger one, and every plan on GPUs, goes through
# scaled_dot_product_attention.
_MATMUL_SCORES_MAX = 1 << 22


def _use_matmul(plan, query, dropout: float) -> bool:
    if query.device.type != "cpu" or dropout:
        return False
    heads = query.shape[1]
    return all(b.size * heads * b.q_width * b.k_width <= _MATMUL_SCORES_MAX for b in plan.batches)


# A batch of segments is padded to its longest query and key range; it takes one more segment
# while its padded score area stays within this factor of the unpadded one.
_PAD_SLACK = 1.5


class _Batch:
    """Segments attended in one call: their tokens' row positions, padded ([n * width]), and the
    mask [n, 1, Qw, Kw] (None: plain causal, no padding and no prefix)."""

    def __init__(self, segments: list[tuple[int, int, int, int]], device):
        # a segment: (row start of its own tokens, their count q, row start of its prefix,
        # the prefix's length p; 0 when it has none)
        self.size = len(segments)
        self.q_width = max(q for _, q, _, _ in segments)
        self.k_width = max(p + q for _, q, _, p in segments)
        q_index, k_index, limits = [], [], []
        for start, q, prefix_start, p in segments:
            q_index += list(range(start, start + q)) + [0] * (self.q_width - q)
            keys = list(range(prefix_start, prefix_start + p)) + list(range(start, start + q))
            k_index += keys + [0] * (self.k_width - p - q)
            # query j sees keys m <= p + j; a padded query sees key 0 only (its output is dropped)
            limits.append([p + j if j < q else 0 for j in range(self.q_width)])
        self.q_index = torch.tensor(q_index, dtype=torch.long, device=device)
        self.k_index = torch.tensor(k_index, dtype=torch.long, device=device)
        plain = all(p == 0 and q == self.q_width for _, q, _, p in segments)
        self.limits = torch.tensor(limits, device=device)  # [n, Qw]
        self.q_lengths = torch.tensor([q for _, q, _, _ in segments], device=device)
        self.mask = None if plain else self._visible(device)[:, None]
        self._additive: dict[tuple, torch.Tensor] = {}
        self._flat: dict[tuple, FlatIndex] = {}

    def _visible(self, device):
        """[n, Qw, Kw]: which keys each (padded) query sees."""
        keys = torch.arange(self.k_width, device=device)
        return keys[None, None, :] <= self.limits.to(device)[:, :, None]

    def additive_mask(self, kv_heads: int, groups: int, dtype, device) -> torch.Tensor:
        """The mask as 0/-inf for `matmul_attention`, repeated for the `groups` query heads of each
        of the `kv_heads`: [n * kv_heads, groups * Qw, Kw] (built once per forward, for every
        layer)."""
        key = (kv_heads, groups, dtype, device)
        if key not in self._additive:
            seen = self._visible(device)
            additive = torch.zeros(seen.shape, dtype=dtype, device=device)
            additive.masked_fill_(~seen, float("-inf"))
            shape = (self.size, kv_heads, groups, self.q_width, self.k_width)
            additive = additive[:, None, None].expand(shape)
            self._additive[key] = additive.reshape(-1, groups * self.q_width, self.k_width)
        return self._additive[key]

    def flat_index(self, heads: int, kv_heads: int, tokens: int, device) -> FlatIndex:
        """Where `matmul_attention` gathers this batch from a row of `tokens` tokens whose
        query heads are rows t * heads + h (keys and values: t * kv_heads + h); built once per
        forward, for every layer."""
        key = (heads, kv_heads, tokens, device)
        if key not in self._flat:
            n, width, groups = self.size, self.q_width, heads // kv_heads
            q_tokens = self.q_index.to(device).view(n, 1, 1, width)
            head = torch.arange(heads, device=device).view(1, kv_heads, groups, 1)
            queries = q_tokens * heads + head  # [n, Hkv, groups, Qw]
            padded = torch.arange(width, device=device) >= self.q_lengths.to(device)[:, None]
            grad_queries = queries.masked_fill(padded[:, None, None], tokens * heads)
            k_tokens = self.k_index.to(device).view(n, 1, self.k_width)
            keys = k_tokens * kv_heads + torch.arange(kv_heads, device=device).view(1, -1, 1)
            self._flat[key] = FlatIndex(queries.flatten(), keys.flatten(), grad_queries.flatten())
        return self._flat[key]


class FlatIndex(NamedTuple):
    """A batch's gathers for `matmul_attention`: `queries` [n * Hkv * groups * Qw] and `keys`
    [n * Hkv * Kw] (rows of the flattened query and key/value heads), and `grad_queries`: the
    query rows with padded positions pointing one past the last row (a zero gradient)."""

    queries: torch.Tensor
    keys: torch.Tensor
    grad_queries: torch.Tensor


class _Plan:
    """A packed row's segments grouped into `_Batch`es of similar shape; `rows` [T] picks each
    row position's output from the batches' concatenated (padded) outputs."""

    def __init__(self, lengths: list[int], prefix_of: list[int], device):
        starts = [0]
        for n in lengths:
            starts.append(starts[-1] + n)
        segments = [
            (starts[i], n, starts[p] if p >= 0 else 0, lengths[p] if p >= 0 else 0)
            for i, (n, p) in enumerate(zip(lengths, prefix_of, strict=True))
            if n > 0
        ]
        segments.sort(key=lambda s: (s[1] + s[3], s[1]))  # by key length, then query length
        groups: list[list[tuple[int, int, int, int]]] = []
        area = q_width = k_width = 0
        for seg in segments:
            q, k = seg[1], seg[1] + seg[3]
            if groups:
                wide_q, wide_k = max(q_width, q), max(k_width, k)
                if (len(groups[-1]) + 1) * wide_q * wide_k <= _PAD_SLACK * (area + q * k):
                    groups[-1].append(seg)
                    area, q_width, k_width = area + q * k, wide_q, wide_k
                    continue
            groups.append([seg])
            area, q_width, k_width = q * k, q, k
        self.batches = [_Batch(g, device) for g in groups]
        position = [0] * starts[-1]  # row position -> index in the concatenated outputs
        column = [0] * starts[-1]  # row position -> its query's index j in its segment
        width = [0] * starts[-1]  # row position -> its batch's query width
        offset = 0
        for batch, group in zip(self.batches, groups, strict=True):
            for i, (start, q, _, _) in enumerate(group):
                for j in range(q):
                    position[start + j] = offset + i * batch.q_width + j
                    column[start + j], width[start + j] = j, batch.q_width
            offset += batch.size * batch.q_width
        self.rows = torch.tensor(position, dtype=torch.long, device=device)
        self.padded_queries = offset  # query positions of all batches, padding included
        self._column, self._width = torch.tensor(column), torch.tensor(width)
        self._output_rows: dict[tuple, torch.Tensor] = {}

    def output_rows(self, heads: int, device) -> torch.Tensor:
        """[T * heads]: where token t's head h is among `matmul_attention`'s outputs, which lay
        each batch out as [n, heads, Qw] query rows (segment i's query j of head h at
        (i * heads + h) * Qw + j, after the earlier batches)."""
        key = (heads, device)
        if key not in self._output_rows:
            column, width = self._column, self._width
            first = heads * (self.rows.cpu() - column) + column  # head 0 of each token
            rows = first[:, None] + torch.arange(heads)[None, :] * width[:, None]
            self._output_rows[key] = rows.flatten().to(device)
        return self._output_rows[key]


_last_plan: tuple = (None, None, None)  # (cu, prefix list, plan): every layer of a forward


def _plan_for(cu, prefix_of, device) -> _Plan:
    """The plan of the row `cu` describes, built once per forward: all layers get the same
    `cu` and prefix objects, so the last plan is reused while they are the ones passed."""
    global _last_plan
    last_cu, last_prefix, plan = _last_plan
    if cu is last_cu and prefix_of is last_prefix:
        return plan
    bounds = cu.tolist() if torch.is_tensor(cu) else list(cu)
    lengths = [end - start for start, end in zip(bounds[:-1], bounds[1:], strict=False)]
    plan = _Plan(lengths, prefix_of or [-1] * len(lengths), device)
    _last_plan = (cu, prefix_of, plan)
    return plan


def separates_sequences(model) -> bool:
    """True when the model's attention keeps a packed row's sequences apart: `mua_varlen` or a
    flash-attn kernel reading the row's boundaries; eager and sdpa attend across the row."""
    impl = getattr(getattr(model, "config", None), "_attn_implementation", None) or ""
    return impl == NAME or impl.startswith("flash")


def shares_prefixes(model) -> bool:
    """True when the model attends through `mua_varlen`, the only path that reads
    `mua_segment_prefix` (shared-prefix rows)."""
    return getattr(getattr(model, "config", None), "_attn_implementation", None) == NAME


def register() -> None:
    global _registered
    if not _registered:
        from transformers import AttentionInterface

        AttentionInterface.register(NAME, varlen_attention)
        _registered = True


def has_sliding_layers(config) -> bool:
    layer_types = getattr(config, "layer_types", None) or []
    if any(t != "full_attention" for t in layer_types):
        return True
    return bool(getattr(config, "use_sliding_window", False)) and bool(
        getattr(config, "sliding_window", None)
    )


def enable_varlen(model) -> str:
    """Switch a freshly loaded sdpa model to `mua_varlen` (flash-attn, eager and the others are
    left as chosen, as are models with sliding-window layers); returns the implementation in use."""
    config = model.config
    current = getattr(config, "_attn_implementation", None) or "sdpa"
    if current != "sdpa" or has_sliding_layers(config):
        return current
    register()
    config._attn_implementation = NAME
    return NAME


# ---- CPU: batched matmuls with a hand-written backward ----------------------------------------


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
        ctx.indices, ctx.scale, ctx.batches = indices, scale, plan.batches
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
        saved, batches = ctx.saved_tensors, ctx.batches
        for i, index in enumerate(ctx.indices):
            q, k, v, probs = saved[4 * i : 4 * i + 4]
            d_out = grad_rows.index_select(0, index.grad_queries).view(q.shape)
            dv.index_add_(0, index.keys, torch.bmm(probs.transpose(1, 2), d_out).view(-1, dim))
            d_probs = torch.bmm(d_out, v.transpose(1, 2))
            # the softmax backward is autograd's own, on recomputed scores (their softmax is
            # the forward's probs bit for bit), so it rounds exactly as autograd does
            additive = batches[i].additive_mask(kv_heads, heads // kv_heads, q.dtype, q.device)
            with torch.enable_grad():
                scores = torch.baddbmm(additive, q, k.transpose(1, 2), alpha=ctx.scale)
                scores.requires_grad_(True)
                (d_scores,) = torch.autograd.grad(scores.softmax(-1), scores, d_probs)
            d_scores.mul_(ctx.scale)
            dq.index_add_(0, index.queries, torch.bmm(d_scores, k).view(-1, dim))
            dk.index_add_(0, index.keys, torch.bmm(d_scores.transpose(1, 2), q).view(-1, dim))

        def as_input(rows, count):  # [T * count, D] -> [1, count, T, D]
            return rows.view(tokens, count, dim).transpose(0, 1)[None]

        return as_input(dq, heads), as_input(dk, kv_heads), as_input(dv, kv_heads), None, None
