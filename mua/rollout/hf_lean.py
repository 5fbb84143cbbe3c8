"""The slot batch's forward for Llama, Qwen2 and Qwen3, written out without transformers' modules.

`lean_forward(model)` returns a function `(input_ids [T], position_ids [T], plan, keep) -> logits`
that runs the same operations, in the same order and on the same weights, as the model's own
forward does for the engine's packed step (RMSNorm in float32, rotary embeddings, attention
through the step's plan, gated MLP, final norm and LM head on the kept rows only), so its logits
equal the model's bit for bit (tested). What it leaves out is the per-module Python around those
operations (hooks, keyword plumbing, decorators, output classes, mask preparation): 12-15% of a
decoding step's time for the tiny 1M and 10M models on CPU.

Only the three families whose layers it reproduces exactly are served (`lean_forward` returns
None for any other model, which then runs its own forward). It reads the modules' weights on every
call, so weight loads and device moves need no notice. Not here: the KV slots and the attention
(`hf_slots`), sampling.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

_CLASSES = ("LlamaForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM")


def lean_forward(model) -> Callable | None:
    """The lean forward of `model`, or None when its architecture is not one of `_CLASSES`."""
    if type(model).__name__ not in _CLASSES or not hasattr(model, "model"):
        return None
    inner = model.model
    if getattr(inner, "rotary_emb", None) is None:
        return None
    return _Lean(model)


def _rms_norm(x, module):
    """transformers' RMSNorm for Llama, Qwen2 and Qwen3, operation for operation."""
    dtype = x.dtype
    x = x.to(torch.float32)
    variance = x.pow(2).mean(-1, keepdim=True)
    x = x * torch.rsqrt(variance + module.variance_epsilon)
    return module.weight * x.to(dtype)


def _rotate(x, cos, sin):
    """Rotary embedding of x [T, heads, D] with cos/sin [T, 1, D], as transformers applies it."""
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return (x * cos) + (rotated * sin)


def _linear(x, module):
    return F.linear(x, module.weight, module.bias)


class _Lean:
    def __init__(self, model):
        self.model = model
        inner = model.model
        self.inner = inner
        self.has_qk_norm = hasattr(inner.layers[0].self_attn, "q_norm")

    def __call__(self, input_ids, position_ids, plan, keep):
        inner = self.inner
        tokens = input_ids.shape[0]
        h = inner.embed_tokens(input_ids)  # [T, hidden]
        cos, sin = inner.rotary_emb(h[None], position_ids[None])  # [1, T, D] each
        cos, sin = cos[0][:, None], sin[0][:, None]  # [T, 1, D]
        for index, layer in enumerate(inner.layers):
            attn = layer.self_attn
            x = _rms_norm(h, layer.input_layernorm)
            dim = attn.head_dim
            q = _linear(x, attn.q_proj).view(tokens, -1, dim)
            k = _linear(x, attn.k_proj).view(tokens, -1, dim)
            v = _linear(x, attn.v_proj).view(tokens, -1, dim)
            if self.has_qk_norm:
                q, k = _rms_norm(q, attn.q_norm), _rms_norm(k, attn.k_norm)
            q, k = _rotate(q, cos, sin), _rotate(k, cos, sin)
            # the plan takes transformers' layout: [1, heads, T, D]
            out = plan.attend(
                index,
                q.transpose(0, 1)[None],
                k.transpose(0, 1)[None],
                v.transpose(0, 1)[None],
                attn.scaling,
            )  # [1, T, heads, D]
            h = h + _linear(out.reshape(tokens, -1), attn.o_proj)
            x = _rms_norm(h, layer.post_attention_layernorm)
            mlp = layer.mlp
            h = h + _linear(
                mlp.act_fn(_linear(x, mlp.gate_proj)) * _linear(x, mlp.up_proj), mlp.down_proj
            )
        return self.model.lm_head(_rms_norm(h[keep], inner.norm))
