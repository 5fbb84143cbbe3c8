"""Prepacked float32 linear layers for the lean forward on CPU (oneDNN), rebuilt on weight changes.

While decoding, every linear layer multiplies a few rows (one per live sequence) by a whole weight
matrix. For such products MKL's fp32 GEMM, which `F.linear` calls on CPU, is slow: 45-65 GFLOP/s
on 2 cores for [32, 256] x [256, 768], against about 175 for the trainer's large products. oneDNN
can take the weight laid out once in its own blocked format
(`torch.ops.mkldnn._reorder_linear_weight`) and then runs the same products faster. Measured on
2 cores, decoding 32 rows x 32 tokens (ms per such rollout, MKL -> packed):
- 10M model: gate|up 165 -> 98, LM head 17 -> 9; the whole rollout 569 -> 513 (median of 8);
- 1.5M model: gate|up 30 -> 23, LM head 9 -> 6; the whole rollout unchanged within noise.

A `PackedLinears` serves one model. The lean forward hands it groups of linear layers that read the
same input (q|k|v and gate|up fused into one matrix each; o, down and the LM head alone); a group
of at least `MIN_PACKED_WEIGHTS` weights is packed the first time it is used and again whenever
one of its weights has changed: a weight push, `load_state_dict` or any in-place edit bumps the
tensor's version counter, and a new tensor object or new storage counts as a change too, so
nobody has to tell it. Repacking the 10M model took 16-24 ms; the engine pays that once per weight
push, on the first decode step after it.

Groups of several layers too small for oneDNN to gain (q|k|v of the 1.5M model) are fused all the
same, their weights concatenated once (`kind` "cat"): one F.linear instead of one per layer and a
concatenation. A group that feeds the residual stream (o, down) can add it in the same call
(`add_to`: oneDNN's sum post-op, the same numbers as adding after).

Costs and limits:
- The packed copies take as much memory again as the linear weights.
- oneDNN sums in another order than MKL: logits match the model's own forward to float32
  rounding, not bit for bit.
- Only float32 weights on CPU, with PyTorch built with oneDNN (`PackedLinears.for_model` returns
  None otherwise, and the lean forward keeps `F.linear`).

Not here: the rest of the forward (`mua.rollout.hf_lean`).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

_ROWS_HINT = 32  # the row count oneDNN tunes the layout for; any row count works
# Groups with fewer weights stay on MKL (F.linear, on their concatenated weights when several
# layers): below this size oneDNN's per-call overhead eats its gain (2 cores, 32 rows, ms per
# rollout of 32 tokens, MKL -> packed: 128x688 down_proj 9.4 -> 11.5, 256x256 o_proj
# 30.6 -> 35.3; 512x256 q|k|v 60.0 -> 50.0, 1536x256 gate|up 146.6 -> 90.1).
MIN_PACKED_WEIGHTS = 1 << 17


def packing_available() -> bool:
    return torch.backends.mkldnn.is_available() and hasattr(
        torch.ops.mkldnn, "_reorder_linear_weight"
    )


class _Packed:
    """One or more linear layers fused along their outputs: laid out for oneDNN (`onednn`), or
    with their weights concatenated as they are."""

    def __init__(self, modules, onednn: bool = True):
        weights = [m.weight for m in modules]
        self.onednn = onednn
        self.sources = tuple(weights)
        self.versions = tuple(w._version for w in weights)
        self.pointers = tuple(w.data_ptr() for w in weights)  # catches `param.data = ...`
        with torch.no_grad():
            weight = weights[0].detach() if len(weights) == 1 else torch.cat(weights)
            if onednn:
                weight = torch.ops.mkldnn._reorder_linear_weight(weight, _ROWS_HINT)
            self.weight = weight
            biases = [m.bias for m in modules]
            if all(b is None for b in biases):
                self.bias = None
            else:
                parts = [
                    b.detach() if b is not None else w.new_zeros(w.shape[0])
                    for b, w in zip(biases, weights, strict=True)
                ]
                self.bias = torch.cat(parts)

    def current(self, modules) -> bool:
        return all(
            m.weight is w and w._version == v and w.data_ptr() == p
            for m, w, v, p in zip(modules, self.sources, self.versions, self.pointers, strict=True)
        )

    def __call__(self, x):
        """x [T, in] -> [T, sum of the layers' outputs], the layers' outputs side by side."""
        if self.onednn:
            return torch.ops.mkldnn._linear_pointwise(x, self.weight, self.bias, "none", [], "")
        return F.linear(x, self.weight, self.bias)

    def add_to(self, h, x):
        """h + self(x) [T, out] in one oneDNN call (a sum post-op: the same numbers); for oneDNN
        packs, which single layers large enough to pack always are."""
        return torch.ops.mkldnn._linear_pointwise.binary(x, h, self.weight, self.bias, "add")


class PackedLinears:
    """The packed groups of one Llama/Qwen2/Qwen3-shaped model, keyed by (layer, group)."""

    def __init__(self):
        self._packs: dict[tuple[int, str], _Packed] = {}

    @classmethod
    def for_model(cls, model) -> PackedLinears | None:
        param = next(model.parameters(), None)
        if param is None or param.device.type != "cpu" or param.dtype != torch.float32:
            return None
        return cls() if packing_available() else None

    def kind(self, modules) -> str | None:
        """How the group runs: "onednn" when it is large enough to gain from oneDNN's layout,
        "cat" for a smaller group of several layers (one product instead of several), None for
        a small layer alone (F.linear on its own weight)."""
        if sum(m.weight.numel() for m in modules) >= MIN_PACKED_WEIGHTS:
            return "onednn"
        return "cat" if len(modules) > 1 else None

    def ensure(self, key: tuple[int, str], modules, onednn: bool = True) -> _Packed:
        """The group's pack, (re)built when missing or when one of its weights changed."""
        pack = self._packs.get(key)
        if pack is None or not pack.current(modules):
            pack = self._packs[key] = _Packed(modules, onednn)
        return pack
