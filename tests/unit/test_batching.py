"""Packing: budgets, and packed log-probs equal per-sequence ones (sdpa and eager attention)."""

from __future__ import annotations

import pytest
import torch

from mua.train.packing import pack, packed_logits, plan_micro_batches, token_logprobs


def test_plan_respects_budget_and_order():
    assert plan_micro_batches([5, 5, 5, 20, 1], 10) == [[0, 1], [2], [3], [4]]
    assert plan_micro_batches([], 10) == []


def test_pack_resets_positions_per_sequence():
    mb = pack([[7, 8, 9], [4, 5]], [1, 0])
    assert mb.input_ids.tolist() == [[4, 5, 7, 8, 9]]
    assert mb.position_ids.tolist() == [[0, 1, 0, 1, 2]]
    assert mb.lengths == [2, 3]


@pytest.mark.parametrize("attn", ["sdpa", "eager", "mua_varlen"])
def test_packed_logprobs_equal_unpacked(attn):
    from mua.models import load_model
    from mua.train.varlen import register

    register()
    torch.set_num_threads(1)
    model = load_model("tiny:qwen2-1m", dtype="float32", seed=0).eval()
    model.config._attn_implementation = attn
    gen = torch.Generator().manual_seed(0)
    seqs = [torch.randint(3, 2000, (n,), generator=gen).tolist() for n in (6, 11, 4)]
    with torch.no_grad():
        mb = pack(seqs, [0, 1, 2])
        packed = token_logprobs(packed_logits(model, mb), mb.input_ids, mb.lengths, temperature=0.7)
        alone = []
        for i in range(3):
            one = pack(seqs, [i])
            alone.append(
                token_logprobs(
                    packed_logits(model, one), one.input_ids, one.lengths, temperature=0.7
                )
            )
    alone = torch.cat(alone)
    assert torch.allclose(packed, alone, atol=1e-5)
    # Sanity: without position resets the second sequence would attend to the first.
    with torch.no_grad():
        ids = mb.input_ids
        leaky = token_logprobs(
            model(input_ids=ids, use_cache=False).logits[0].float(), ids, mb.lengths, 0.7
        )
    assert not torch.allclose(leaky, alone, atol=1e-3)


def test_varlen_attention_builds_no_mask_and_matches_plain_forward(monkeypatch):
    """The trainer's default path: one packed row, per-sequence causal attention, no [T, T] mask."""
    import transformers.masking_utils as masking

    from mua.models import load_model
    from mua.train.varlen import NAME, enable_varlen

    torch.set_num_threads(1)
    model = load_model("tiny:qwen2-1m", dtype="float32", seed=0).eval()
    gen = torch.Generator().manual_seed(1)
    seqs = [torch.randint(3, 2000, (n,), generator=gen).tolist() for n in (9, 3, 14, 7)]
    with torch.no_grad():
        plain = [model(input_ids=torch.tensor([s])).logits[0] for s in seqs]
    assert enable_varlen(model) == NAME

    def no_mask(*args, **kwargs):
        raise AssertionError("a packed-sequence mask was built")

    monkeypatch.setattr(masking, "find_packed_sequence_indices", no_mask)
    with torch.no_grad():
        mb = pack(seqs, [0, 1, 2, 3])
        packed = packed_logits(model, mb)
        single = model(input_ids=torch.tensor([seqs[2]])).logits[0]  # no boundaries: one sequence
    assert torch.allclose(packed, torch.cat(plain), atol=1e-5)
    assert torch.allclose(single, plain[2], atol=1e-5)


def test_enable_varlen_leaves_flash_eager_and_sliding_window_models_alone():
    from types import SimpleNamespace

    from mua.train.varlen import enable_varlen

    flash = SimpleNamespace(config=SimpleNamespace(_attn_implementation="flash_attention_2"))
    assert enable_varlen(flash) == "flash_attention_2"
    eager = SimpleNamespace(config=SimpleNamespace(_attn_implementation="eager"))
    assert enable_varlen(eager) == "eager"  # chosen explicitly: kept
    sliding = SimpleNamespace(
        config=SimpleNamespace(
            _attn_implementation="sdpa", layer_types=["full_attention", "sliding_attention"]
        )
    )
    assert enable_varlen(sliding) == "sdpa"


def test_trainer_attention_follows_the_recipe_and_defaults_to_sdpa_on_cpu():
    from mua.config.recipes import TrainRecipe
    from mua.train.modeling import trainer_attention

    base = {"model": {"path": "tiny:qwen2-1m"}, "gym": {"name": "guess"}}
    base["data"] = {"train_files": ["x.parquet"]}
    assert trainer_attention(TrainRecipe.model_validate(base)) == "sdpa"  # no GPU here
    eager = {**base, "model": {"path": "tiny:qwen2-1m", "attn_implementation": "eager"}}
    assert trainer_attention(TrainRecipe.model_validate(eager)) == "eager"


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_scored_logprobs_equal_full_ones_on_marked_tokens_only(temperature):
    """With masks the LM head runs only where a marked token is predicted; the log-probs and
    entropies there equal the full computation's, and every other position is 0."""
    from mua.models import load_model
    from mua.train.packing import scored_logprobs

    torch.set_num_threads(1)
    model = load_model("tiny:qwen2-1m", dtype="float32", seed=0).eval()
    gen = torch.Generator().manual_seed(1)
    seqs = [torch.randint(3, 2000, (n,), generator=gen).tolist() for n in (7, 12, 5)]
    masks = [[0, 0, 0, 1, 1, 0, 1], [1] * 12, [0] * 5]
    calls = []
    hook = model.lm_head.register_forward_hook(lambda m, args, out: calls.append(args[0].shape[1]))
    with torch.no_grad():
        full_mb = pack(seqs, [0, 1, 2])
        logits = packed_logits(model, full_mb)
        full = token_logprobs(logits, full_mb.input_ids, full_mb.lengths, temperature)
        logp_all = torch.log_softmax(logits / temperature, dim=-1)
        entropy_full = -(logp_all.exp() * logp_all).sum(-1)  # entropy of the prediction at i
        mb = pack(seqs, [0, 1, 2], masks=masks)
        logp, entropy = scored_logprobs(packed_logits(model, mb), mb, temperature)
    hook.remove()
    marked = torch.tensor([0, 0, 0, 1, 1, 0, 1] + [0] + [1] * 11 + [0] * 5, dtype=torch.bool)
    assert mb.scored.tolist() == marked.nonzero().squeeze(1).tolist()
    assert calls == [24, int(marked.sum())]  # the second forward ran the head on 14 rows
    assert torch.allclose(logp[marked], full[marked], atol=1e-6)
    assert torch.all(logp[~marked] == 0) and torch.all(entropy[~marked] == 0)
    predictor = marked.nonzero().squeeze(1) - 1
    assert torch.allclose(entropy[marked], entropy_full[predictor], atol=1e-5)
