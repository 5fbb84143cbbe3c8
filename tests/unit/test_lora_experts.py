"""`model.lora.experts` on a mixture of experts (tiny:qwen3moe-2m): per-expert adapters on the
fused expert tensors change the experts' output, merge per expert into the tensors the forward
uses, and stay off by default (then the experts and routers are frozen: only attention adapts)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from mua.config.model import LoraConfig
from mua.models import load_model
from mua.models.lora import ExpertLora, add_adapters, lora_scalings, merged_params

MODEL = "tiny:qwen3moe-2m"


def _adapted(experts: bool):
    torch.manual_seed(0)
    cfg = SimpleNamespace(rank=4, alpha=8.0, dropout=0.0, target_modules="all-linear",
                          embeddings=False, experts=experts)  # fmt: skip
    model = add_adapters(load_model(MODEL, dtype="float32", seed=0), cfg)
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():  # a trained adapter: B is not 0
        for name, tensor in model.named_parameters():
            if "lora_B" in name:
                tensor.copy_(torch.randn(tensor.shape, generator=gen) * 0.05)
    return model.eval()


def _moe_output(model, hidden):
    block = model.get_base_model().model.layers[0].mlp
    with torch.no_grad():
        return block(hidden)


def test_expert_adapters_change_the_experts_output_and_merge_per_expert():
    hidden = torch.randn(1, 6, 128, generator=torch.Generator().manual_seed(2))
    base = load_model(MODEL, dtype="float32", seed=0).eval()
    with torch.no_grad():
        base_out = base.model.layers[0].mlp(hidden)
    off, on = _adapted(False), _adapted(True)
    trained = {n for n, p in on.named_parameters() if p.requires_grad}
    assert any(".mlp.experts." in n for n in trained)
    assert not any(".mlp.gate." in n for n in trained)  # the router stays frozen
    assert not any(".mlp." in n for n, p in off.named_parameters() if p.requires_grad)
    assert torch.equal(_moe_output(off, hidden), base_out)
    assert float((_moe_output(on, hidden) - base_out).abs().max()) > 1e-3

    scalings = lora_scalings(on)
    experts = {n: s for n, s in scalings.items() if isinstance(s, ExpertLora)}
    assert sorted({s.parameter for s in experts.values()}) == ["down_proj", "gate_up_proj"]
    assert len(experts) == 2 * 4 and all(s.num_experts == 8 for s in experts.values())
    merged = dict(merged_params(((n, p.detach()) for n, p in on.named_parameters()), scalings))
    assert set(merged) == set(base.state_dict()) - {"lm_head.weight"}  # tied to the embedding
    base.load_state_dict(merged, strict=False)
    ids = torch.randint(0, 1000, (2, 12), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        diff = (base(input_ids=ids).logits - on(input_ids=ids).logits).abs().max()
    assert float(diff) < 1e-5


def test_expert_adapters_take_no_dropout():
    with pytest.raises(ValueError, match="set model.lora.dropout=0"):
        LoraConfig(dropout=0.1, experts=True)
    assert LoraConfig(experts=True).experts and not LoraConfig().experts
