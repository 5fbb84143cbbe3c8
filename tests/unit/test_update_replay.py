"""Several RL steps replayed on one fixed buffer (no sampling): mua's `update()` with two epochs of
two mini-batches per step, a warm-up then cosine learning-rate schedule, gradient clipping and
weight decay, against the float64 reference of `tests/unit/update_reference.py` stepping its own
AdamW through the same schedule; and a run stopped after its first step, checkpointed with the
trainer's checkpoint code and resumed into fresh parts, against the uninterrupted run.

The buffer is seeded and the tolerances relative (float32 against float64), so nothing here
depends on the machine; resume is compared with the uninterrupted run in the same process.
"""

from __future__ import annotations

import pytest
import torch

from tests.unit.update_harness import (
    named_params,
    one_rank_update,
    scored_samples,
    trainer_parts,
)
from tests.unit.update_reference import (
    AdamW,
    clip_gradients,
    clipped_policy_loss,
    fixed_rows,
    flat,
    lr_at,
    reference_lm,
    relative_error,
    scored,
)

GROUPS, N = 2, 4
STEPS = 3
EPOCHS, MINI_BATCHES = 2, 2
OPTIMIZER_STEPS = STEPS * EPOCHS * MINI_BATCHES
# float32 against float64, measured over the replay: step losses within 5e-6, mean gradient
# norms within 6e-5, the parameters' whole change within 3e-5 (relative).
LOSS_RTOL, NORM_RTOL, DELTA_RTOL = 5e-5, 5e-4, 1e-3


def _configs():
    from mua.config.train import GRPOConfig, OptimConfig, ParallelConfig

    algo = GRPOConfig(epochs=EPOCHS, mini_batches=MINI_BATCHES)
    optim = OptimConfig(lr=2e-3, weight_decay=0.1, warmup_steps=3, schedule="cosine", grad_clip=0.5)
    return algo, optim, ParallelConfig(micro_batch_tokens=64)


@pytest.fixture(scope="module")
def buffer():
    """The fixed buffer: rows, their token advantages and behaviour log-probs (the model's own
    at the start, plus seeded noise)."""
    from mua.train.rl_batch import group_relative_advantages, with_inputs

    algo, _, _ = _configs()
    rows = fixed_rows(GROUPS, N, seed=5)
    batch = scored_samples(rows, algo, N)
    tokens, _ = group_relative_advantages(batch, algo)
    lm = reference_lm()
    gen = torch.Generator().manual_seed(6)
    behaviour = []
    with torch.no_grad():
        for r in rows:
            logp = scored(lm, r.token_ids)[0]
            noise = torch.randn(logp.shape, generator=gen, dtype=torch.float64) * 0.2
            behaviour.append(((logp + noise) * torch.tensor(r.loss_mask)).float().tolist())
    return rows, with_inputs(batch.samples, tokens, behaviour, None)


def _mua_steps(parts, samples, steps):
    algo, optim, parallel = _configs()
    metrics = []
    for _ in range(steps):
        result = one_rank_update(parts, None, samples, algo, optim, parallel, GROUPS * N, 1.0)
        metrics.append(result.metrics)
    return metrics


@pytest.fixture(scope="module")
def uninterrupted(buffer):
    _, samples = buffer
    algo, optim, parallel = _configs()
    parts = trainer_parts(optim, parallel, OPTIMIZER_STEPS)
    start = named_params(parts[0])
    metrics = _mua_steps(parts, samples, STEPS)
    return start, metrics, named_params(parts[0])


def test_replay_matches_the_float64_reference(buffer, uninterrupted):
    rows, samples = buffer
    algo, optim, _ = _configs()
    start, metrics, end = uninterrupted
    lm = reference_lm()
    params = dict(lm.named_parameters())
    adamw = AdamW(params.values(), optim.betas, optim.weight_decay)
    per = GROUPS * N // MINI_BATCHES  # contiguous slices of the global batch
    k, every_norm = 0, []
    for step in range(STEPS):
        losses, norms, lrs = [], [], []
        for _ in range(EPOCHS):
            for lo in range(0, GROUPS * N, per):
                mini = [(r, s) for r, s in zip(rows, samples, strict=True)]
                mini = [(r, s) for r, s in mini if lo <= s.global_index < lo + per]
                tokens = sum(sum(r.loss_mask[1:]) for r, _ in mini)
                lm.zero_grad(set_to_none=True)
                loss = torch.zeros((), dtype=torch.float64)
                for r, s in mini:
                    logp = scored(lm, r.token_ids)[0]
                    terms = clipped_policy_loss(
                        logp,
                        torch.as_tensor(s.old_logprobs, dtype=torch.float64),
                        s.advantages.double(),
                        algo.loss.clip_low,
                        algo.loss.clip_high,
                    )
                    mask = torch.tensor(r.loss_mask, dtype=torch.float64)
                    loss = loss + (terms * mask)[1:].sum()
                loss = loss / tokens
                loss.backward()
                norms.append(clip_gradients(list(params.values()), optim.grad_clip))
                lr = lr_at(k, optim.lr, optim.warmup_steps, optim.schedule, OPTIMIZER_STEPS)
                adamw.step(lr)
                losses.append(loss.item())
                lrs.append(lr)
                k += 1
        got = metrics[step]
        assert got["optimizer_steps"] == EPOCHS * MINI_BATCHES
        assert got["loss"] == pytest.approx(sum(losses) / len(losses), rel=LOSS_RTOL), step
        assert got["grad_norm"] == pytest.approx(sum(norms) / len(norms), rel=NORM_RTOL), step
        assert got["lr"] == pytest.approx(lrs[-1], rel=1e-12), step
        every_norm += norms
    # the clip acts at some optimizer steps and not at others: both branches are compared
    assert max(every_norm) > optim.grad_clip > min(every_norm), every_norm
    want = {n: p.detach() - start[n] for n, p in params.items()}
    got_delta = {n: end[n] - start[n] for n in end}
    assert got_delta.keys() == want.keys()
    assert relative_error(flat(got_delta.values()), flat(want.values())) < DELTA_RTOL


def test_resumed_replay_equals_the_uninterrupted_one(buffer, uninterrupted, tmp_path):
    """Step 1, a checkpoint through `mua.train.checkpoint`, then steps 2.. in fresh parts."""
    from mua.train import checkpoint as ckpt

    _, samples = buffer
    _, optim, parallel = _configs()
    _, metrics, end = uninterrupted
    model, optimizer, scheduler = trainer_parts(optim, parallel, OPTIMIZER_STEPS)
    first = _mua_steps((model, optimizer, scheduler), samples, 1)
    path = ckpt.save_checkpoint(
        tmp_path,
        1,
        model=model,
        optimizer=optimizer,
        trainer_state={"step": 1, "scheduler": scheduler.state_dict()},
        rank=0,
        keep_last=1,
    )
    del model, optimizer, scheduler
    fresh = trainer_parts(optim, parallel, OPTIMIZER_STEPS, seed=1)  # other weights until loaded
    state = ckpt.load_checkpoint(path, model=fresh[0], optimizer=fresh[1], rank=0)
    fresh[2].load_state_dict(state["scheduler"])
    rest = _mua_steps(fresh, samples, STEPS - 1)
    for step, (a, b) in enumerate(zip(metrics, first + rest, strict=True)):
        for key in ("loss", "grad_norm", "lr"):
            assert a[key] == b[key], (step, key)
    resumed = named_params(fresh[0])
    assert all(torch.equal(resumed[n], end[n]) for n in end)
