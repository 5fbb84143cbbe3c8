"""The slot batch's lean forward (`mua.rollout.hf_lean`) gives the model's own logits bit for bit,
for every family it serves, through steps where newcomers join live rows."""

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


def _run(model, lean: bool) -> list[torch.Tensor]:
    """Logits of every step: 3 rows, then 2 more join, then decoding until all finish."""
    batch = SlotBatch(model, torch.device("cpu"))
    if not lean:
        batch.lean = None
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
    lean, own = _run(model, lean=True), _run(model, lean=False)
    assert len(lean) == len(own) >= 6
    for a, b in zip(lean, own, strict=True):
        assert torch.equal(a, b)


def test_other_architectures_keep_their_own_forward():
    from transformers import GPT2Config, GPT2LMHeadModel

    model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=64))
    assert lean_forward(model) is None
