"""The trainer's RMSNorm: transformers' forward bit for bit, the same gradients, same state dict."""

from __future__ import annotations

import pytest
import torch

from mua.kernels.rms_norm import RMSNorm, use_fast_rms_norm
from mua.models import load_model


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("shape", [(7, 32), (2, 5, 3, 16)])  # tokens x hidden; q/k heads
def test_rms_norm_matches_transformers(dtype, shape):
    from transformers.models.qwen2.modeling_qwen2 import Qwen2RMSNorm

    gen = torch.Generator().manual_seed(0)
    ref = Qwen2RMSNorm(shape[-1], eps=1e-5)
    with torch.no_grad():
        ref.weight.copy_(torch.randn(shape[-1], generator=gen))
    ref.to(dtype)
    ours = RMSNorm(torch.nn.Parameter(ref.weight.detach().clone()), ref.variance_epsilon)
    x = (torch.randn(shape, generator=gen) * 3).to(dtype).requires_grad_(True)
    want, got = ref(x), ours(x)
    assert got.dtype == want.dtype and torch.equal(got, want)
    dy = torch.randn(shape, generator=gen).to(dtype)
    want_dx, want_dw = torch.autograd.grad(want, (x, ref.weight), dy)
    got_dx, got_dw = torch.autograd.grad(got, (x, ours.weight), dy)
    tol = 1e-5 if dtype == torch.float32 else 3e-2
    scale = want_dw.abs().max().float()
    assert got_dx.dtype == dtype and got_dw.dtype == dtype
    assert torch.allclose(got_dx.float(), want_dx.float(), atol=tol, rtol=tol)
    assert (got_dw.float() - want_dw.float()).abs().max() <= tol * scale


def test_use_fast_rms_norm_replaces_every_norm_and_keeps_the_state_dict():
    model = load_model("tiny:qwen3-1m", dtype="float32", seed=0)
    ids = torch.tensor([[5, 9, 2, 7, 11]])
    before_logits = model(ids).logits
    keys = list(model.state_dict())
    weight = model.model.layers[0].input_layernorm.weight
    # 4 layers x (input, post-attention, q and k norms) + the final norm
    assert use_fast_rms_norm(model) == 4 * 4 + 1
    norms = [m for m in model.modules() if type(m).__name__.endswith("RMSNorm")]
    assert len(norms) == 4 * 4 + 1 and all(type(m) is RMSNorm for m in norms)
    assert list(model.state_dict()) == keys
    assert model.model.layers[0].input_layernorm.weight is weight  # the same parameter
    assert torch.equal(model(ids).logits, before_logits)


@pytest.mark.parametrize("device_type", ["cpu", "cuda"])
def test_the_hand_written_norm_is_installed_on_cpu_only(device_type, monkeypatch):
    """On a GPU the trainer keeps library norms (transformers', or Liger's when installed)."""
    import importlib.util

    from mua.train.trained_model import use_trainer_norms

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "liger_kernel" else real_find_spec(name, *a),
    )
    model = load_model("tiny:qwen2-1m", dtype="float32", seed=0)
    used = use_trainer_norms(model, device_type)
    ours = [m for m in model.modules() if type(m) is RMSNorm]
    if device_type == "cpu":
        assert used == "mua" and len(ours) == 4 * 2 + 1
    else:
        assert used == "transformers" and not ours
