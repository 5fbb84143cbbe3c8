"""RMSNorm with a hand-written backward for the trained Llama, Qwen2 and Qwen3 models on CPU.

The forward is transformers' operations in the same order (bit for bit, tested); the backward is
written out in five passes from the saved normalised activations (dW = Σ dy·n; dx = rstd·(dn −
n·mean(dn·n)), dn = dy·W), in float32, cast back. `use_fast_rms_norm(model)` swaps the model's
norms in place (same parameter names); the trainer does so on CPU only, and `use_liger_rms_norm`
puts Liger's kernel in on GPUs when installed. Not here: double backward, other architectures.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.autograd.function import once_differentiable

_NORMS = ("LlamaRMSNorm", "Qwen2RMSNorm", "Qwen3RMSNorm")


class RMSNorm(nn.Module):
    """transformers' RMSNorm (weight * x / sqrt(mean(x^2) + eps), in float32) with `_RMSNormFn`'s
    backward; takes over the weight of the norm it replaces."""

    def __init__(self, weight: nn.Parameter, eps: float):
        super().__init__()
        self.weight = weight
        self.variance_epsilon = eps

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return _RMSNormFn.apply(hidden_states, self.weight, self.variance_epsilon)

    def extra_repr(self) -> str:
        return f"{tuple(self.weight.shape)}, eps={self.variance_epsilon}"


def use_fast_rms_norm(model: nn.Module) -> int:
    """Replace every Llama/Qwen2/Qwen3 RMSNorm of `model` by `RMSNorm`; returns how many."""
    return _replace_norms(model, lambda m: RMSNorm(m.weight, m.variance_epsilon))


def use_liger_rms_norm(model: nn.Module) -> int:
    """Replace every Llama/Qwen2/Qwen3 RMSNorm by Liger's kernel (GPU; liger-kernel must be
    installed), keeping the weights; returns how many."""
    from liger_kernel.transformers.rms_norm import LigerRMSNorm

    def liger(module):
        norm = LigerRMSNorm(module.weight.shape[0], eps=module.variance_epsilon)
        norm.weight = module.weight  # the same parameter: state dict and optimizer unchanged
        return norm

    return _replace_norms(model, liger)


def _replace_norms(model: nn.Module, make) -> int:
    targets = [
        (name, module)
        for name, module in model.named_modules()
        if type(module).__name__ in _NORMS
        and isinstance(getattr(module, "weight", None), nn.Parameter)
    ]
    for name, module in targets:
        model.set_submodule(name, make(module))
    return len(targets)


class _RMSNormFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, eps):
        dtype = x.dtype
        x32 = x.to(torch.float32)
        rstd = torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)
        normed = x32 * rstd
        ctx.save_for_backward(normed, rstd, weight)
        ctx.dtype = dtype
        return weight * normed.to(dtype)

    @staticmethod
    @once_differentiable
    def backward(ctx, dy):
        normed, rstd, weight = ctx.saved_tensors
        dy32 = dy.to(torch.float32)
        d_weight = None
        if ctx.needs_input_grad[1]:
            n = normed.to(ctx.dtype).to(torch.float32)  # what multiplied the weight
            d_weight = (dy32 * n).reshape(-1, n.shape[-1]).sum(0).to(weight.dtype)
        d_x = None
        if ctx.needs_input_grad[0]:
            d_normed = dy32 * weight.to(torch.float32)
            mean = (d_normed * normed).mean(-1, keepdim=True)
            d_x = d_normed.sub_(normed * mean).mul_(rstd).to(ctx.dtype)
        return d_x, d_weight, None
