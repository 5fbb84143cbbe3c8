"""The slot batch's lean forward (`mua.rollout.hf_lean`) gives the model's own logits bit for bit,
for every family it serves, through steps where newcomers join live rows; with oneDNN-packed
linears (`mua.rollout.hf_packed`, the CPU default) it gives them to float32 rounding, and its
packs follow weight changes."""

from __future__ import annotations

import pytest
import torch

from mua.models import load_model
from mua.rollout.engine import GenerationRequest, SamplingParams
from mua.rollout.hf_lean import lean_forward
from mua.rollout.hf_sampling import Row
from mua.rollout.hf_slots import SlotBatch


def _requests(seed: int, count: int, budget: int) -> list[Row]:
    gen = torch.Generator().manual_seed(seed)
    rows = []
    for i in range(count):
        length = int(torch.randint(3, 20, (1,), generator=gen))
        prompt = torch.randint(3, 1999, (length,), generator=gen).tolist()
        sampling = SamplingParams(temperature=1.0, max_new_tokens=budget, seed=seed * 100 + i)
        rows.append(Row(GenerationRequest(prompt_ids=prompt, sampling=sampling)))
    return rows


def _run(model, mode: str, lean=None) -> list[torch.Tensor]:
    """Logits of every step: 3 rows, then 2 more join, then decoding until all finish.
    mode: "own" (the model's forward), "exact" (lean, F.linear) or "packed" (lean, default;
    `lean` reuses a lean forward and so its packs)."""
    batch = SlotBatch(model, torch.device("cpu"))
    if mode == "own":
        batch.lean = None
    elif mode == "exact":
        batch.lean = lean_forward(model, packed=False)
    else:
        batch.lean = lean or batch.lean
        assert batch.lean.packed is not None  # float32 on CPU: packed by default
    seen = []
    forward = batch._forward

    def record(*args):
        logits = forward(*args)
        seen.append(logits.clone())
        return logits

    batch._forward = record
    waves = [_requests(1, 3, 6), [], _requests(2, 2, 4)]
    with torch.inference_mode():
        for wave in waves:
            batch.step(wave)
        while len(batch):
            batch.step()
    return seen


@pytest.mark.parametrize("preset", ["tiny:qwen2-1m", "tiny:qwen3-1m", "tiny:llama-1m"])
def test_lean_forward_equals_the_models_forward(preset):
    model = load_model(preset, dtype="float32", seed=0).eval()
    assert lean_forward(model) is not None
    lean, own = _run(model, "exact"), _run(model, "own")
    assert len(lean) == len(own) >= 6
    for a, b in zip(lean, own, strict=True):
        assert torch.equal(a, b)


def test_positions_past_the_rotary_table_regrow_it_and_stay_exact():
    """The lean forward reads cos/sin from a table of positions; a prompt longer than the table
    (256 positions at first) regrows it, and the logits stay the model's own bit for bit."""
    model = load_model("tiny:qwen3-1m", dtype="float32", seed=0).eval()
    gen = torch.Generator().manual_seed(3)
    prompts = [torch.randint(3, 1999, (n,), generator=gen).tolist() for n in (40, 300)]
    seen = {}
    for mode in ("exact", "own"):
        batch = SlotBatch(model, torch.device("cpu"))
        batch.lean = lean_forward(model, packed=False) if mode == "exact" else None
        logits = seen[mode] = []

        def recording(*args, forward=batch._forward, logits=logits):
            logits.append(forward(*args))
            return logits[-1]

        batch._forward = recording
        rows = [
            Row(GenerationRequest(prompt_ids=p, sampling=SamplingParams(max_new_tokens=3, seed=i)))
            for i, p in enumerate(prompts)
        ]
        with torch.inference_mode():
            batch.step(rows[:1])  # the table covers 256 positions
            batch.step(rows[1:])  # position 299 regrows it
            while len(batch):
                batch.step()
    assert batch.lean is None and len(seen["exact"]) == len(seen["own"]) >= 4
    for a, b in zip(seen["exact"], seen["own"], strict=True):
        assert torch.equal(a, b)


@pytest.mark.parametrize("preset", ["tiny:qwen2-1m", "tiny:qwen3-1m", "tiny:llama-1m"])
def test_packed_linears_give_the_models_logits_to_rounding(preset):
    model = load_model(preset, dtype="float32", seed=0).eval()
    packed, own = _run(model, "packed"), _run(model, "own")
    assert len(packed) == len(own) >= 6
    for a, b in zip(packed, own, strict=True):
        assert torch.allclose(a, b, atol=1e-5, rtol=0)


def test_packs_follow_weight_changes():
    """An in-place edit (as a weight push makes) or a new weight tensor reaches the packed
    forward."""
    model = load_model("tiny:qwen2-1m", dtype="float32", seed=0).eval()
    lean = lean_forward(model)
    before = _run(model, "packed", lean)
    mlp = model.model.layers[0].mlp
    with torch.no_grad():
        mlp.gate_proj.weight.mul_(3.0)  # gate|up of this model is large enough to be packed
    edited = _run(model, "packed", lean)
    assert not torch.allclose(edited[0], before[0], atol=1e-3)
    for a, b in zip(edited, _run(model, "own"), strict=True):
        assert torch.allclose(a, b, atol=1e-5, rtol=0)
    mlp.up_proj.weight = torch.nn.Parameter(mlp.up_proj.weight.detach() * 0.5)
    for a, b in zip(_run(model, "packed", lean), _run(model, "own"), strict=True):
        assert torch.allclose(a, b, atol=1e-5, rtol=0)


def test_prepack_lays_out_every_packed_group_before_the_first_step(monkeypatch):
    """After `prepack` (the engine's `prepare`, run while the first requests are prepared) a step
    packs nothing more; after a weight edit it repacks just the edited group."""
    from mua.rollout import hf_packed

    model = load_model("tiny:qwen2-1m", dtype="float32", seed=0).eval()
    lean = lean_forward(model)
    built = []  # the modules of every group packed

    class Counting(hf_packed._Packed):
        def __init__(self, modules, onednn=True):
            super().__init__(modules, onednn)
            built.append(tuple(modules))

    monkeypatch.setattr(hf_packed, "_Packed", Counting)
    lean.prepack()
    groups = [lin for layer in lean.layers for lin in layer.linears] + [lean.head]
    assert len(built) == sum(lin.packable for lin in groups) >= 2  # gate|up per layer, LM head
    built.clear()
    _run(model, "packed", lean)
    assert built == []
    mlp = model.model.layers[1].mlp
    with torch.no_grad():
        mlp.up_proj.weight.mul_(0.5)
    lean.prepack()
    assert built == [(mlp.gate_proj, mlp.up_proj)]


def test_other_architectures_keep_their_own_forward():
    from transformers import GPT2Config, GPT2LMHeadModel

    model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=64))
    assert lean_forward(model) is None
