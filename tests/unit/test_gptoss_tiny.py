"""tiny:gptoss-2m, a gpt-oss mixture of experts built on CPU: what works.

Works: the preset builds with eager attention (transformers has no sdpa path for its attention
sinks), its routers are the ones the replay code knows, and the exported config loads back.
Its eager attention cannot keep a packed row's sequences apart (only `mua_varlen` and flash-attn
read the row's boundaries), so the trainer gives it one sequence a row.
"""

from __future__ import annotations

import torch

from mua.models import load_model
from mua.models.moe_replay import routers

MODEL = "tiny:gptoss-2m"


def test_the_gpt_oss_preset_builds_on_cpu_with_its_routers():
    model = load_model(MODEL, attn_implementation="sdpa")  # what the trainer asks for
    assert type(model).__name__ == "GptOssForCausalLM"
    assert model.config._attn_implementation == "eager"
    assert sum(p.numel() for p in model.parameters()) == 2_300_592
    found = routers(model)
    assert [type(r).__name__ for r in found] == ["GptOssTopKRouter"] * 4
    assert model.config.layer_types[:2] == ["sliding_attention", "full_attention"]
    assert not model.config.tie_word_embeddings


def test_the_trainer_keeps_gpt_oss_sequences_apart():
    """gpt-oss's eager attention cannot keep a packed row's sequences apart, so the trainer's
    forwards give it one sequence a row: each sequence's logits equal its own forward's. Packed
    into one row, the second sequence's would differ (checked first)."""
    from mua.train.packed_batch import pack
    from mua.train.packed_forward import forward_only, packed_logits

    model = load_model(MODEL, attn_implementation="sdpa").eval()
    gen = torch.Generator().manual_seed(0)
    seqs = [torch.randint(3, 2000, (n,), generator=gen).tolist() for n in (20, 150)]
    with torch.no_grad():
        alone = [model(input_ids=torch.tensor([s])).logits[0] for s in seqs]
        row = packed_logits(model, pack(seqs, [0, 1], "cpu"))
    assert float((row[20:] - alone[1]).abs().max()) > 1e-2  # one row mixes them
    got = forward_only(model, seqs, 4096, "cpu", lambda mb, out: list(out.split(mb.lengths)))
    for logits, own in zip(got, alone, strict=True):
        assert float((logits - own).abs().max()) < 1e-4
