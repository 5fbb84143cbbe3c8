"""The slot batch's forward for Llama, Qwen2 and Qwen3, written out without transformers' modules.

`lean_forward(model)` returns a function
`(input_ids [T], position_ids [T], plan, keep, max_position) -> logits`
that runs the same operations, in the same order and on the same weights, as the model's own
forward does for the engine's packed step (RMSNorm in float32, rotary embeddings, attention
through the step's plan, gated MLP, final norm and LM head on the kept rows only), so its logits
equal the model's bit for bit (tested). What it leaves out is the per-module Python around those
operations (hooks, keyword plumbing, decorators, output classes, mask preparation): 12-15% of a
decoding step's time for the tiny 1M and 10M models on CPU. It also reads the rotary embedding's
cos/sin from a table the model's own rotary module filled once (the same numbers; about a dozen
small operations fewer per step). Where it can (float32 on CPU), its linear layers run packed
(`mua.rollout.hf_packed`: the larger ones laid out for oneDNN, small groups concatenated, the
residual sums done in the same call): faster, and equal to the model's logits to float32 rounding
rather than bit for bit; `lean_forward(model, packed=False)` keeps them exact.

Only the three families whose layers it reproduces exactly are served (`lean_forward` returns
None for any other model, which then runs its own forward). It looks the modules up once, at
construction, and reads their weights on every call, so weight loads and device moves need no
notice (replacing a module does). Not here: the KV slots and the attention (`hf_slots`), sampling.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from mua.rollout.hf_packed import PackedLinears

_CLASSES = ("LlamaForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM")


def lean_forward(model, packed: bool = True) -> Callable | None:
    """The lean forward of `model`, or None when its architecture is not one of `_CLASSES`.
    `packed=False` keeps F.linear even where oneDNN-packed linears could run (bit-exact logits)."""
    if type(model).__name__ not in _CLASSES or not hasattr(model, "model"):
        return None
    inner = model.model
    if getattr(inner, "rotary_emb", None) is None:
        return None
    return _Lean(model, packed)


def _rms_norm(x, module):
    """transformers' RMSNorm for Llama, Qwen2 and Qwen3, operation for operation. In float32
    PyTorch's own rms_norm computes exactly that (same operations, same order: tested bit for
    bit) with one call instead of six."""
    dtype = x.dtype
    if dtype == torch.float32 and module.weight.dtype == torch.float32:
        return F.rms_norm(x, module.weight.shape, module.weight, module.variance_epsilon)
    x = x.to(torch.float32)
    variance = x.pow(2).mean(-1, keepdim=True)
    x = x * torch.rsqrt(variance + module.variance_epsilon)
    return module.weight * x.to(dtype)


def _rotate(x, cos, sin_folded):
    """Rotary embedding of x [T, heads, D] with cos/sin [T, 1, D], as transformers applies it
    (x * cos + rotate_half(x) * sin), with rotate_half's negation folded into the sin table
    (`_fold_sign`): (-a) * b and a * (-b) are the same float, so the result is too."""
    half = x.shape[-1] // 2
    swapped = torch.cat((x[..., half:], x[..., :half]), dim=-1)
    return (x * cos) + (swapped * sin_folded)


def _fold_sign(sin):
    """sin [..., D] with its first half negated (what rotate_half negates)."""
    half = sin.shape[-1] // 2
    return torch.cat((-sin[..., :half], sin[..., half:]), dim=-1)


class _Linears:
    """Linear layers reading the same input (q|k|v, gate|up, or one alone), applied together: one
    packed product where `PackedLinears` packs the group, else one F.linear each."""

    def __init__(self, modules: tuple, key: tuple[int, str], packed: PackedLinears | None):
        self.modules, self.key = modules, key
        self.sizes = [m.weight.shape[0] for m in modules]
        self.kind = packed.kind(modules) if packed is not None else None
        self.packable = self.kind is not None

    def pack(self, packed: PackedLinears):
        return packed.ensure(self.key, self.modules, onednn=self.kind == "onednn")

    def outputs(self, x, packed: PackedLinears | None) -> tuple:
        """Each layer's output [T, out_i]; `packed` None: F.linear."""
        if packed is not None and self.packable:
            whole = self.pack(packed)(x)
            return whole.split(self.sizes, dim=-1) if len(self.sizes) > 1 else (whole,)
        return tuple(F.linear(x, m.weight, m.bias) for m in self.modules)

    def side_by_side(self, x, packed: PackedLinears | None):
        """The layers' outputs side by side: [T, sum of out_i]."""
        if packed is not None and self.packable:
            return self.pack(packed)(x)
        return torch.cat(self.outputs(x, None), dim=-1)

    def add_to(self, h, x, packed: PackedLinears | None):
        """h + the output of this one layer on x. `packed` None: exactly that; else in one call
        (oneDNN's sum post-op, or addmm: the sum rounded once, not twice)."""
        (module,) = self.modules
        if packed is None:
            return h + F.linear(x, module.weight, module.bias)
        if self.kind == "onednn":
            return self.pack(packed).add_to(h, x)
        if module.bias is None:
            return torch.addmm(h, x, module.weight.t())
        return h + F.linear(x, module.weight, module.bias)


class _Layer:
    """One decoder layer's modules and sizes, looked up once (weights are read on every call)."""

    def __init__(self, index: int, layer, packed: PackedLinears | None):
        attn, mlp = layer.self_attn, layer.mlp
        self.input_norm, self.post_norm = layer.input_layernorm, layer.post_attention_layernorm
        self.q_norm, self.k_norm = getattr(attn, "q_norm", None), getattr(attn, "k_norm", None)
        self.head_dim, self.scaling = attn.head_dim, attn.scaling
        self.heads = attn.q_proj.weight.shape[0] // attn.head_dim
        self.qk_width = attn.q_proj.weight.shape[0] + attn.k_proj.weight.shape[0]
        self.qkv = _Linears((attn.q_proj, attn.k_proj, attn.v_proj), (index, "qkv"), packed)
        self.o = _Linears((attn.o_proj,), (index, "o"), packed)
        self.gate_up = _Linears((mlp.gate_proj, mlp.up_proj), (index, "gate_up"), packed)
        self.down = _Linears((mlp.down_proj,), (index, "down"), packed)
        self.linears = (self.qkv, self.o, self.gate_up, self.down)
        self.act = mlp.act_fn


class _Lean:
    def __init__(self, model, packed: bool = True):
        self.model = model
        self.inner = model.model
        # CPU float32: oneDNN-packed linears (q|k|v and gate|up fused); else None: F.linear
        self.packed = PackedLinears.for_model(model) if packed else None
        self.layers = [_Layer(i, layer, self.packed) for i, layer in enumerate(self.inner.layers)]
        self.head = _Linears((model.lm_head,), (-1, "lm_head"), self.packed)
        self._rope_key: tuple | None = None
        self._rope_table = None  # [N, 2, D]: cos and sign-folded sin of positions 0..N-1

    def prepack(self) -> None:
        """Bring every packed group up to date with its weights (what the next call would do)."""
        weight = self.head.modules[0].weight
        if self.packed is None or weight.device.type != "cpu" or weight.dtype != torch.float32:
            return
        for linears in [lin for layer in self.layers for lin in layer.linears] + [self.head]:
            if linears.packable:
                linears.pack(self.packed)

    def _cos_sin(self, h, position_ids, max_position: int):
        """cos and sign-folded sin (`_fold_sign`) [T, 1, D] at the positions. Rows of a table the
        model's rotary embedding computes once for positions 0..N-1 (its values are elementwise
        in the position: the same numbers as computing them every step); computed every step for
        rotary types that change with the sequence length (dynamic, longrope)."""
        rotary = self.inner.rotary_emb
        rope_type = str(getattr(rotary, "rope_type", "default"))
        if "dynamic" in rope_type or "longrope" in rope_type:
            cos, sin = rotary(h[None], position_ids[None])  # [1, T, D] each
            return cos[0][:, None], _fold_sign(sin[0])[:, None]
        inv_freq = rotary.inv_freq
        key = (h.device, h.dtype, inv_freq.data_ptr(), inv_freq._version, rotary.attention_scaling)
        if self._rope_key != key or self._rope_table.shape[0] <= max_position:
            size = 256
            while size <= max_position:
                size *= 2
            positions = torch.arange(size, device=h.device)[None]
            cos, sin = rotary(h[None], positions)  # [1, N, D] each
            self._rope_table = torch.stack((cos[0], _fold_sign(sin[0])), dim=1)  # [N, 2, D]
            self._rope_key = key
        both = self._rope_table[position_ids]  # [T, 2, D]
        return both[:, :1], both[:, 1:]

    def __call__(self, input_ids, position_ids, plan, keep, max_position: int):
        """Logits [len(keep), V]; `max_position` is the largest of `position_ids`."""
        inner = self.inner
        tokens = input_ids.shape[0]
        h = inner.embed_tokens(input_ids)  # [T, hidden]
        packed = self.packed if h.device.type == "cpu" and h.dtype == torch.float32 else None
        cos, sin = self._cos_sin(h, position_ids, max_position)  # [T, 1, D] each
        for index, layer in enumerate(self.layers):
            x = _rms_norm(h, layer.input_norm)
            qkv = layer.qkv.side_by_side(x, packed)
            qk = qkv[:, : layer.qk_width].view(tokens, -1, layer.head_dim)  # q heads, kv heads
            v = qkv[:, layer.qk_width :].view(tokens, -1, layer.head_dim)
            heads = layer.heads
            if layer.q_norm is not None:
                q, k = (
                    _rms_norm(qk[:, :heads], layer.q_norm),
                    _rms_norm(qk[:, heads:], layer.k_norm),
                )
                qk = torch.cat((q, k), dim=1)
            qk = _rotate(qk, cos, sin)  # q and k in one go: elementwise, the same numbers
            q, k = qk[:, :heads], qk[:, heads:]
            # the plan takes transformers' layout: [1, heads, T, D]
            out = plan.attend(
                index,
                q.transpose(0, 1)[None],
                k.transpose(0, 1)[None],
                v.transpose(0, 1)[None],
                layer.scaling,
            )  # [1, T, heads, D]
            h = layer.o.add_to(h, out.reshape(tokens, -1), packed)
            x = _rms_norm(h, layer.post_norm)
            gate, up = layer.gate_up.outputs(x, packed)
            h = layer.down.add_to(h, layer.act(gate) * up, packed)
        x = _rms_norm(h[keep], inner.norm)
        return self.head.outputs(x, packed)[0]
