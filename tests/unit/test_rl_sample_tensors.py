"""The per-token record as tensors from scoring to the update: `TokenRecord.to_tensors`, the
samples `score` makes, and an update fed tensors equal, bit for bit, to one fed the same numbers
as Python lists (the form the samples carried before)."""

from __future__ import annotations

import dataclasses

import torch

from mua.rollout.token_record import TokenRecord
from tests.unit.update_harness import named_params, one_rank_update, scored_samples, trainer_parts
from tests.unit.update_reference import fixed_rows


def test_to_tensors_keeps_every_number_and_its_dtype():
    rec = TokenRecord()
    rec.append([5, 6], "prompt", 0)
    rec.append([7, 8, 9], "policy", 1, logprobs=[-0.1, -1e-9, -2.5], turn=0, version=3)
    t = rec.to_tensors()
    assert t.token_ids.dtype == t.loss_mask.dtype == t.turn_index.dtype == torch.long
    assert t.versions.dtype == torch.long and t.logprobs.dtype == torch.float64
    assert t.token_ids.tolist() == [5, 6, 7, 8, 9] and t.loss_mask.tolist() == [0, 0, 1, 1, 1]
    assert t.turn_index.tolist() == [-1, -1, 0, 0, 0] and t.versions.tolist() == [-1, -1, 3, 3, 3]
    assert t.logprobs.tolist() == [0.0, 0.0, -0.1, -1e-9, -2.5]  # the engine's floats exactly


def _configs():
    from mua.config.train import GRPOConfig, OptimConfig, ParallelConfig

    algo = GRPOConfig(correction="icepop", loss={"entropy_coef": 0.01})
    return algo, OptimConfig(lr=1e-3, grad_clip=0.05), ParallelConfig(micro_batch_tokens=64)


def test_scored_samples_carry_tensors_and_the_update_matches_list_inputs():
    from mua.train.packed_batch import concat_per_token
    from mua.train.rl_batch import group_relative_advantages, with_inputs

    algo, optim, parallel = _configs()
    batch = scored_samples(fixed_rows(2, 4), algo, 4)
    for s in batch.samples:  # the cleaned mask and the record's numbers, made once at scoring
        assert s.tensors.loss_mask.tolist() == s.loss_mask
        assert s.tensors.token_ids.tolist() == s.token_ids
    tokens, _ = group_relative_advantages(batch, algo)
    assert all(isinstance(t, torch.Tensor) for t in tokens)
    gen = torch.Generator().manual_seed(0)
    old = [-torch.rand(len(s.token_ids), generator=gen) for s in batch.samples]
    engine = [(o.double() - 3.0 * torch.rand(len(o), generator=gen)).tolist() for o in old]
    samples = [  # engine log-probs of float64 precision, as an engine's JSON gives them
        dataclasses.replace(s, record=dataclasses.replace(s.record, logprobs=e), tensors=None)
        for s, e in zip(batch.samples, engine, strict=True)
    ]
    idx = list(range(len(samples)))
    behav = concat_per_token([s.tensors.logprobs for s in samples], idx)
    assert torch.equal(behav, concat_per_token([s.engine_logprobs for s in samples], idx))
    as_tensors = with_inputs(samples, tokens, old, None)
    assert isinstance(as_tensors[0].advantages, torch.Tensor)
    as_lists = with_inputs(samples, [t.tolist() for t in tokens], [o.tolist() for o in old], None)
    params, metrics = [], []
    for inputs in (as_tensors, as_lists):
        parts = trainer_parts(optim, parallel, optimizer_steps=1)
        result = one_rank_update(parts, None, inputs, algo, optim, parallel, 8, 1.0)
        params.append(named_params(parts[0]))
        metrics.append(result.metrics)
    assert metrics[0] == metrics[1] and metrics[0]["actor/is_masked_frac"] > 0
    assert all(torch.equal(params[0][k], params[1][k]) for k in params[0])
