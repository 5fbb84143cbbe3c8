"""Variable-length attention for the trainer's packed rows when flash-attn is not there (CPU, plain GPU).

A packed row holds several sequences back to back. Through transformers' `sdpa` path such a row
costs a [T, T] block-diagonal mask per layer and attention over all T² query/key pairs, most of
them masked: on CPU a 2,000-token row of 32 sequences was 2.5x slower than the same tokens as
padded rows. `mua_varlen`, registered with transformers' AttentionInterface, instead runs PyTorch's
`scaled_dot_product_attention` with `is_causal=True` on each sequence's slice of the row, from the
sequence boundaries the packer passes as `cu_seq_lens_q` (the keyword flash-attn's varlen kernel
takes too). Because the implementation has no mask function registered, transformers builds no
mask for it at all. Cost: Σ len² instead of T², no padding, exact same numbers as the masked path.

With `mua_segment_prefix` (one entry per segment: the index of an earlier segment it continues,
or -1), a segment attends to all of that prefix segment and then causally to itself: the n
samples of a prompt feed the prompt once (`mua.train.prefix_packing`).

A call without `cu_seq_lens_q` treats each batch row as one causal sequence (a single unpadded
prompt, as the weight probe sends). Padded batches must not be sent through this implementation
(no attention mask reaches it); the trainer never pads. Sliding-window layers are not supported:
`enable_varlen` leaves such models on their own implementation.
Not here: packing (see `mua.train.packing`), flash-attn itself (used as is when configured).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

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
    bounds = cu.tolist() if torch.is_tensor(cu) else list(cu)
    lengths = [end - start for start, end in zip(bounds[:-1], bounds[1:], strict=False)]
    prefix_of = kwargs.get("mua_segment_prefix") or [-1] * len(lengths)
    # split (not slicing): its backward is one concatenation, not a full-size gradient per slice
    qs, ks, vs = query.split(lengths, dim=2), key.split(lengths, dim=2), value.split(lengths, dim=2)
    parts = []
    for q, k, v, prefix in zip(qs, ks, vs, prefix_of, strict=True):
        if q.shape[2] == 0:
            continue
        seen = None  # plain causal
        if prefix >= 0:  # a segment continuing a shared prefix: all of it, then causal over itself
            k, v = torch.cat([ks[prefix], k], dim=2), torch.cat([vs[prefix], v], dim=2)
            seen = torch.ones(q.shape[2], k.shape[2], dtype=torch.bool, device=q.device)
            seen = seen.tril(k.shape[2] - q.shape[2])
        parts.append(
            F.scaled_dot_product_attention(
                q,
                k,
                v,
                attn_mask=seen,
                is_causal=seen is None,
                scale=scaling,
                dropout_p=dropout,
                enable_gqa=gqa,
            )
        )
    out = parts[0] if len(parts) == 1 else torch.cat(parts, dim=2)
    return out.transpose(1, 2).contiguous(), None


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
