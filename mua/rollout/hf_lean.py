"""The slot batch's forward for Llama, Qwen2 and Qwen3, written out without transformers' modules.

`lean_forward(model)` returns a function `(input_ids [T], position_ids [T], plan, keep) -> logits`
that runs the same operations, in the same order and on the same weights, as the model's own
forward does for the engine's packed step (RMSNorm in float32, rotary embeddings, attention
through the step's plan, gated MLP, final norm and LM head on the kept rows only), so its logits
equal the model's bit for bit (tested). What it leaves out is the per-module Python around those
operations (hooks, keyword plumbing, decorators, output classes, mask preparation): 12-15% of a
decoding step's time for the tiny 1M and 10M models on CPU. Where it can (float32 on CPU), its
larger linear layers run oneDNN-packed (`mua.rollout.hf_packed`): faster, and equal to the model's
logits to float32 rounding rather than bit for bit; `lean_forward(model, packed=False)` keeps them
exact.

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


def _rotate(x, cos, sin):
    """Rotary embedding of x [T, heads, D] with cos/sin [T, 1, D], as transformers applies it."""
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return (x * cos) + (rotated * sin)


class _Linears:
    """Linear layers reading the same input (q|k|v, gate|up, or one alone), applied together: one
    oneDNN-packed product where the group is large enough, else one F.linear each."""

    def __init__(self, modules: tuple, key: tuple[int, str], packed: PackedLinears | None):
        self.modules, self.key = modules, key
        self.sizes = [m.weight.shape[0] for m in modules]
        self.packable = packed is not None and packed.wanted(modules)

    def outputs(self, x, packed: PackedLinears | None) -> tuple:
        """Each layer's output [T, out_i]; `packed` None: F.linear."""
        if packed is not None and self.packable:
            whole = packed.apply(self.key, self.modules, x)
            return whole.split(self.sizes, dim=-1) if len(self.sizes) > 1 else (whole,)
        return tuple(F.linear(x, m.weight, m.bias) for m in self.modules)

    def side_by_side(self, x, packed: PackedLinears | None):
        """The layers' outputs side by side: [T, sum of out_i]."""
        if packed is not None and self.packable:
            return packed.apply(self.key, self.modules, x)
        return torch.cat(self.outputs(x, None), dim=-1)


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

    def prepack(self) -> None:
        """Bring every packed group up to date with its weights (what the next call would do)."""
        weight = self.head.modules[0].weight
        if self.packed is None or weight.device.type != "cpu" or weight.dtype != torch.float32:
            return
        for linears in [lin for layer in self.layers for lin in layer.linears] + [self.head]:
            if linears.packable:
                self.packed.ensure(linears.key, linears.modules)

    def __call__(self, input_ids, position_ids, plan, keep):
        inner = self.inner
        tokens = input_ids.shape[0]
        h = inner.embed_tokens(input_ids)  # [T, hidden]
        packed = self.packed if h.device.type == "cpu" and h.dtype == torch.float32 else None
        cos, sin = inner.rotary_emb(h[None], position_ids[None])  # [1, T, D] each
        cos, sin = cos[0][:, None], sin[0][:, None]  # [T, 1, D]
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
            h = h + layer.o.outputs(out.reshape(tokens, -1), packed)[0]
            x = _rms_norm(h, layer.post_norm)
            gate, up = layer.gate_up.outputs(x, packed)
            h = h + layer.down.outputs(layer.act(gate) * up, packed)[0]
        x = _rms_norm(h[keep], inner.norm)
        return self.head.outputs(x, packed)[0]
