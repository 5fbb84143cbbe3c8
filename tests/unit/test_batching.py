"""Packing: budgets, and packed log-probs equal per-sequence ones (sdpa and eager attention)."""

from __future__ import annotations

import pytest
import torch

from mua.train.packed_batch import pack, plan_micro_batches
from mua.train.packed_forward import packed_logits, token_logprobs


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
    from mua.kernels.packed_attention import register
    from mua.models import load_model

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

    from mua.kernels.packed_attention import NAME, enable_varlen
    from mua.models import load_model

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

    from mua.kernels.packed_attention import enable_varlen

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
    from mua.train.trained_model import trainer_attention

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
    from mua.train.packed_forward import scored_logprobs

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
    assert mb.input_ids.shape[1] == 24 - 3  # each sequence's last token is only a target
    assert torch.allclose(logp[marked], full[marked], atol=1e-6)
    assert torch.all(logp[~marked] == 0) and torch.all(entropy[~marked] == 0)
    predictor = marked.nonzero().squeeze(1) - 1
    assert torch.allclose(entropy[marked], entropy_full[predictor], atol=1e-5)


def _prompted(prompt, suffix_lengths, gen):
    seqs = [prompt + torch.randint(3, 2000, (n,), generator=gen).tolist() for n in suffix_lengths]
    masks = [[0] * len(prompt) + [1] * n for n in suffix_lengths]
    return seqs, masks


def test_shared_layout_feeds_untrained_common_prefixes_once():
    from mua.train.packed_batch import shared_layout

    a, b = list(range(100, 120)), list(range(200, 230))
    seqs = [a + [1, 2], a + [3], a[:10] + [4] * 12, b + [5, 6], b + [7]]
    masks = [[0] * 20 + [1, 1], [0] * 20 + [1], [0] * 22, [0] * 30 + [1, 1], [0] * 29 + [1, 1]]
    layout = shared_layout(seqs, masks, [0, 1, 2, 3, 4], min_shared=16)
    # a is shared by 0 and 1; 2 agrees on only 10 tokens; 4's token 29 is trained, so the
    # prefix of 3 and 4 stops before it
    assert layout.segments == [20, 2, 1, 22, 29, 3, 2]
    assert layout.segment_prefix == [-1, 0, 0, -1, -1, 4, 4]
    assert layout.positions[20:23] == [20, 21, 20] and layout.positions[45:52] == [
        0,
        1,
        2,
        3,
        4,
        5,
        6,
    ]
    assert len(layout.row_of) == sum(len(s) for s in seqs)
    assert [layout.ids[r] for r in layout.row_of] == [t for s in seqs for t in s]


def test_shared_layout_leaves_last_tokens_out_with_drop_last():
    from mua.train.packed_batch import shared_layout

    a = list(range(100, 120))
    seqs = [a + [1, 2], a + [3], [7, 8, 9]]
    masks = [[0] * 20 + [1, 1], [0] * 20 + [1], [0, 1, 1]]
    layout = shared_layout(seqs, masks, [0, 1, 2], min_shared=16, drop_last=True)
    # the prefix a, then 0's own [1] (its 2 left out); 1's own token is its last: no segment
    assert layout.ids == a + [1] + [7, 8]
    assert layout.segments == [20, 1, 2] and layout.segment_prefix == [-1, 0, -1]
    assert layout.row_of == [*range(20), 20, -1, *range(20), -1, 21, 22, -1]
    alone = shared_layout(seqs, masks, [0, 1, 2], min_shared=None, drop_last=True)
    assert alone.segments == [21, 20, 2] and not alone.shares


def test_shared_prefix_rows_give_the_same_logprobs_and_gradients():
    from mua.kernels.packed_attention import enable_varlen
    from mua.models import load_model
    from mua.train.packed_forward import scored_logprobs

    torch.set_num_threads(1)
    model = load_model("tiny:qwen2-1m", dtype="float32", seed=0)
    assert enable_varlen(model) == "mua_varlen"
    gen = torch.Generator().manual_seed(2)
    s1, m1 = _prompted(torch.randint(3, 2000, (24,), generator=gen).tolist(), [5, 9, 1], gen)
    s2, m2 = _prompted(torch.randint(3, 2000, (18,), generator=gen).tolist(), [7, 4], gen)
    seqs, masks = [*s1, [9] * 11, *s2], [*m1, [0] * 5 + [1] * 6, *m2]
    indices = list(range(len(seqs)))

    def run(share):
        model.zero_grad()
        mb = pack(seqs, indices, masks=masks, share_prefixes=share)
        logp, entropy = scored_logprobs(packed_logits(model, mb), mb, temperature=0.8)
        (logp.sum() + 0.1 * logp.pow(2).sum()).backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        return mb, logp.detach(), entropy, grads

    shared_mb, shared, shared_entropy, shared_grads = run(True)
    whole_mb, whole, whole_entropy, whole_grads = run(False)
    assert shared_mb.input_ids.shape[1] == whole_mb.input_ids.shape[1] - 2 * 24 - 18
    assert torch.allclose(shared, whole, atol=1e-5)
    assert torch.allclose(shared_entropy, whole_entropy, atol=1e-5)
    assert shared_grads.keys() == whole_grads.keys()
    for name, g in whole_grads.items():
        assert torch.allclose(shared_grads[name], g, atol=1e-5, rtol=1e-4), name


def _reference_attention(q, k, v, lengths, prefix_of):
    """Each segment alone: all of its prefix segment's keys, then causal over its own tokens."""
    starts = [0]
    for n in lengths:
        starts.append(starts[-1] + n)
    outs = []
    for i, n in enumerate(lengths):
        own = slice(starts[i], starts[i] + n)
        p = prefix_of[i]
        keys = list(range(starts[p], starts[p] + lengths[p])) if p >= 0 else []
        keys += list(range(starts[i], starts[i] + n))
        kk, vv = k[:, :, keys], v[:, :, keys]
        kk = kk.repeat_interleave(q.shape[1] // k.shape[1], dim=1)
        vv = vv.repeat_interleave(q.shape[1] // v.shape[1], dim=1)
        scores = q[:, :, own] @ kk.transpose(-1, -2) * q.shape[-1] ** -0.5
        visible = torch.ones(n, len(keys), dtype=torch.bool).tril(len(keys) - n)
        weights = scores.masked_fill(~visible, float("-inf")).softmax(-1)
        outs.append((weights @ vv).transpose(1, 2))  # [1, n, H, D]
    return torch.cat(outs, dim=1)


@pytest.mark.parametrize(
    "lengths,prefix_of",
    [
        ([5, 5, 5], [-1, -1, -1]),  # equal causal segments: one unmasked batch
        ([40, 3, 17, 2, 9], [-1, -1, -1, -1, -1]),  # lengths 20x apart: several batches
        ([24, 5, 9, 1, 11, 18, 7, 4], [-1, 0, 0, 0, -1, -1, 5, 5]),  # shared prefixes
    ],
)
@pytest.mark.parametrize("matmul", [True, False], ids=["matmul", "sdpa"])
@pytest.mark.parametrize("layout", ["heads-major", "transformers"])
def test_varlen_attention_batches_segments_exactly(lengths, prefix_of, matmul, layout, monkeypatch):
    """Segments batched (padded, masked) give what each segment attended alone gives, with the
    same gradients, through both attention paths: batched matmuls with their own backward (small
    batches on CPU) and scaled_dot_product_attention; for contiguous [1, H, T, D] inputs and for
    transformers' layout (heads as a transposed view of [1, T, H, D])."""
    from mua.kernels import packed_attention as varlen

    if not matmul:
        monkeypatch.setattr(varlen, "_MATMUL_SCORES_MAX", 0)
    real, calls = varlen.matmul_attention, []

    def counting(*args):
        calls.append(args)
        return real(*args)

    monkeypatch.setattr(varlen, "matmul_attention", counting)
    gen = torch.Generator().manual_seed(3)
    total = sum(lengths)

    def heads(count):
        if layout == "transformers":
            x = torch.randn(1, total, count, 8, generator=gen).transpose(1, 2)
        else:
            x = torch.randn(1, count, total, 8, generator=gen)
        return x.requires_grad_(True)

    q, k, v = heads(4), heads(2), heads(2)
    bounds = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32)
    out, _ = varlen.varlen_attention(
        None, q, k, v, None, cu_seq_lens_q=bounds, mua_segment_prefix=prefix_of
    )
    ref = _reference_attention(q, k, v, lengths, prefix_of)
    assert torch.allclose(out, ref, atol=1e-5)
    weights = torch.randn(ref.shape, generator=gen)
    grads = torch.autograd.grad((out * weights).sum(), (q, k, v))
    ref_grads = torch.autograd.grad((ref * weights).sum(), (q, k, v))
    for g, r in zip(grads, ref_grads, strict=True):
        assert torch.allclose(g, r, atol=1e-5)
    plan = varlen._plan_for(bounds, prefix_of, q.device)
    if len(set(lengths)) == 1:
        assert len(plan.batches) == 1 and plan.batches[0].mask is None
    if max(lengths) > 10 * min(lengths):
        assert len(plan.batches) > 1  # padded to the longest, the short ones would waste > 1.5x
    assert len(calls) == (1 if matmul else 0)


def test_varlen_matmul_attention_under_activation_checkpointing():
    """The CPU matmul path keeps its intermediates through saved-tensor hooks: recomputed under
    non-reentrant activation checkpointing, its gradients are the plain run's."""
    from torch.utils.checkpoint import checkpoint

    from mua.kernels import packed_attention as varlen

    lengths, prefix_of = [6, 3, 4, 5], [-1, 0, 0, -1]
    bounds = torch.tensor([0, 6, 9, 13, 18], dtype=torch.int32)
    gen = torch.Generator().manual_seed(5)
    q, k, v = (torch.randn(1, h, 18, 8, generator=gen, requires_grad=True) for h in (4, 2, 2))

    def attend(q, k, v):
        out, _ = varlen.varlen_attention(
            None, q, k, v, None, cu_seq_lens_q=bounds, mua_segment_prefix=prefix_of
        )
        return out

    weights = torch.randn(1, 18, 4, 8, generator=gen)
    plain = torch.autograd.grad((attend(q, k, v) * weights).sum(), (q, k, v))
    checked = checkpoint(attend, q, k, v, use_reentrant=False)
    again = torch.autograd.grad((checked * weights).sum(), (q, k, v))
    for a, b in zip(plain, again, strict=True):
        assert torch.equal(a, b)
    ref = _reference_attention(q, k, v, lengths, prefix_of)
    assert torch.allclose(checked, ref, atol=1e-5)
