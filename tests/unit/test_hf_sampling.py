"""The hf engine's batched sampler: the distribution it draws from, top-k/top-p, seeds per row."""

from __future__ import annotations

import torch

from mua.engines.engine_contract import GenerationRequest, SamplingParams
from mua.engines.hf.hf_sampling import Row, row_generator, sample

LOGITS = torch.tensor([2.0, 1.0, 0.5, 0.0, -1.0])


def _rows(count: int, seed0: int, **sampling) -> list[Row]:
    rows = []
    for i in range(count):
        params = SamplingParams(max_new_tokens=1, seed=seed0 + i, **sampling)
        row = Row(request=GenerationRequest(prompt_ids=[1], sampling=params))
        row.generator = row_generator(params.seed, "cpu")
        rows.append(row)
    return rows


def _draw(count: int, **sampling) -> torch.Tensor:
    rows = _rows(count, 0, **sampling)
    tokens, _ = sample(LOGITS.repeat(count, 1), rows)
    return torch.bincount(torch.tensor(tokens), minlength=LOGITS.numel()).float() / count


def test_draws_follow_the_tempered_softmax():
    freq = _draw(20_000, temperature=0.7, top_p=1.0, top_k=0)
    expected = torch.softmax(LOGITS / 0.7, dim=-1)
    assert torch.allclose(freq, expected, atol=0.015), (freq, expected)


def test_top_k_and_top_p_cut_the_tail_and_renormalise():
    assert (_draw(4_000, temperature=1.0, top_p=1.0, top_k=2)[2:] == 0).all()
    probs = torch.softmax(LOGITS, dim=-1)  # 0.53, 0.20, 0.12, ...: top_p 0.6 keeps tokens 0 and 1
    freq = _draw(20_000, temperature=1.0, top_p=0.6, top_k=0)
    assert (freq[2:] == 0).all()
    assert abs(float(freq[0]) - float(probs[0] / probs[:2].sum())) < 0.015


def test_a_rows_draw_depends_on_its_seed_not_its_batch_mates():
    alone, _ = sample(LOGITS[None], _rows(1, 41, temperature=1.0, top_p=1.0, top_k=0))
    crowd_rows = _rows(8, 37, temperature=1.0, top_p=0.9, top_k=3)
    crowd_rows[4] = _rows(1, 41, temperature=1.0, top_p=1.0, top_k=0)[0]
    crowd, _ = sample(LOGITS.repeat(8, 1), crowd_rows)
    assert crowd[4] == alone[0]


def test_logprobs_are_of_the_unfiltered_tempered_distribution_and_greedy_takes_the_argmax():
    rows = _rows(2, 5, temperature=0.5, top_p=0.5, top_k=1)
    rows[1].request.sampling.temperature = 0.0
    tokens, logprobs = sample(LOGITS.repeat(2, 1), rows)
    assert tokens == [0, 0]
    assert abs(logprobs[0] - float(torch.log_softmax(LOGITS / 0.5, -1)[0])) < 1e-6
    assert abs(logprobs[1] - float(torch.log_softmax(LOGITS, -1)[0])) < 1e-6


def test_a_draw_is_the_token_whose_cumulative_probability_first_exceeds_the_rows_uniform():
    """One uniform per row and token, from the row's seed: the contract seeded runs rely on."""
    probs = torch.softmax(LOGITS / 0.9, dim=-1)
    cdf = probs.cumsum(-1)
    rows = _rows(50, 100, temperature=0.9, top_p=1.0, top_k=0)
    tokens, _ = sample(LOGITS.repeat(50, 1), rows)
    for i, token in enumerate(tokens):
        u = float(torch.rand(1, generator=row_generator(100 + i, "cpu")))
        assert float(cdf[token]) > u * float(cdf[-1])
        assert token == 0 or float(cdf[token - 1]) <= u * float(cdf[-1])


def test_a_rows_kth_token_uses_the_kth_uniform_of_its_generator():
    """Uniforms are drawn ahead in chunks; token k still uses the k-th number of the row's seeded
    stream, across chunk boundaries too."""
    steps = 150  # more than two chunks
    cdf = torch.softmax(LOGITS, dim=-1).cumsum(-1)
    rows = _rows(3, 7, temperature=1.0, top_p=1.0, top_k=0)
    for row in rows:
        row.request.sampling.max_new_tokens = steps
    drawn = [[] for _ in rows]
    for _ in range(steps):
        tokens, logprobs = sample(LOGITS.repeat(3, 1), rows)
        for row, token, lp, seen in zip(rows, tokens, logprobs, drawn, strict=True):
            row.record(token, lp)
            seen.append(token)
    for i, seen in enumerate(drawn):
        stream = torch.rand(steps, generator=row_generator(7 + i, "cpu"))
        expected = torch.searchsorted(cdf, stream[:, None] * cdf[-1], right=True)[:, 0]
        assert seen == expected.tolist()
