"""One real `update()` of mua's trainer (`mua.train.policy_update.update`) on a fixed batch agrees with a plain
float64 implementation of the formulas in docs/algorithms.md (`tests/unit/update_reference.py`):
the loss, the gradient norm, every clipped gradient and the parameter change of the step, for
GRPO (group advantages, entropy bonus, temperature) and for PPO (critic values, GAE, whitening,
the clipped value loss, the dual clip, the critic's own step).

Both sides start from the same seeded tiny model and read the same seeded batch; the behaviour
log-probs are the model's own plus seeded noise, so the ratio is off 1 and the clip is active, and
the gradient clip is set below the gradient norm, so it acts. Nothing compares against numbers
stored from another machine: the tolerances are relative and cover float32 against float64
rounding only. Each of these breakages fails them: the clip's min taken as a max or its lower
bound's sign flipped, the policy loss over every token instead of the sampled ones, the token
normaliser counting unsampled tokens, the value loss without its mask or its clip's max as a min.
"""

from __future__ import annotations

import pytest
import torch

from tests.unit.update_harness import (
    named_grads,
    named_params,
    one_rank_update,
    scored_samples,
    trainer_critic,
    trainer_parts,
)
from tests.unit.update_reference import (
    AdamW,
    ReferenceCritic,
    clip_gradients,
    clipped_policy_loss,
    clipped_value_loss,
    fixed_rows,
    flat,
    gae,
    grpo_advantages,
    reference_lm,
    relative_error,
    scored,
    turn_rewards_on_tokens,
    whiten,
)

GROUPS, N = 2, 4
NOISE = 0.3  # std of the noise on behaviour log-probs and old values
# float32 (mua) against float64 (reference). Measured: losses within 5e-7, gradients and their
# norm within 1.1e-5 (the tokens' contributions, of both signs, largely cancel, which magnifies
# float32 rounding), parameter changes within 2.1e-5. A broken loss moves them by 1e-2 or more.
LOSS_RTOL = 1e-5
GRAD_RTOL = 1e-4
DELTA_RTOL = 1e-3  # AdamW's first step is lr·g/(|g| + eps): tiny gradients round differently


def _configs(algo: dict):
    from mua.config.train import GRPOConfig, OptimConfig, ParallelConfig, PPOConfig

    kind = {"grpo": GRPOConfig, "ppo": PPOConfig}[algo["kind"]]
    # several micro-batches per step, a task's samples sharing their prompt in the packed rows
    parallel = ParallelConfig(micro_batch_tokens=64, share_prefixes=True)
    optim = OptimConfig(lr=1e-3, weight_decay=0.01, grad_clip=0.05)
    return kind(**algo), optim, parallel


def _masks(rows) -> list[torch.Tensor]:
    out = []
    for r in rows:
        m = torch.tensor(r.loss_mask, dtype=torch.float64)
        m[0] = 0.0  # no prediction for a sequence's first token
        out.append(m)
    return out


def _noisy(values: list[torch.Tensor], masks, seed: int) -> list[list[float]]:
    """`values` plus seeded noise on the sampled tokens, as float32 lists (what the trainer reads)."""
    gen = torch.Generator().manual_seed(seed)
    out = []
    for v, m in zip(values, masks, strict=True):
        noise = torch.randn(v.shape, generator=gen, dtype=torch.float64) * NOISE
        out.append(((v.detach() + noise) * m).float().tolist())
    return out


def _reference_policy_step(rows, advantages, behaviour, algo, optim, temperature):
    """The float64 policy step: (loss, grad norm, clipped grads, parameter change)."""
    lm = reference_lm()
    params = dict(lm.named_parameters())
    before = {k: p.detach().clone() for k, p in params.items()}
    masks = _masks(rows)
    tokens = sum(float(m.sum()) for m in masks)
    loss = torch.zeros((), dtype=torch.float64)
    for row, adv, old, mask in zip(rows, advantages, behaviour, masks, strict=True):
        logp, entropy = scored(lm, row.token_ids, temperature)
        terms = clipped_policy_loss(
            logp,
            torch.tensor(old, dtype=torch.float64),
            torch.tensor(adv, dtype=torch.float64),
            algo.loss.clip_low,
            algo.loss.clip_high,
            algo.loss.dual_clip,
        )
        terms = terms - algo.loss.entropy_coef * entropy
        loss = loss + (terms * mask).sum()
    loss = loss / tokens  # token-mean over the whole mini-batch
    loss.backward()
    norm = clip_gradients(list(params.values()), optim.grad_clip)
    grads = {k: p.grad.clone() for k, p in params.items()}
    AdamW(params.values(), optim.betas, optim.weight_decay).step(optim.lr)
    return loss.item(), norm, grads, {k: params[k].detach() - before[k] for k in params}


def _assert_step_matches(metrics, grads, delta, want, prefix=""):
    loss, norm, want_grads, want_delta = want
    assert metrics[f"{prefix}loss"] == pytest.approx(loss, rel=LOSS_RTOL), "loss"
    assert metrics[f"{prefix}grad_norm"] == pytest.approx(norm, rel=GRAD_RTOL), "grad norm"
    assert grads.keys() == want_grads.keys()
    assert relative_error(flat(grads.values()), flat(want_grads.values())) < GRAD_RTOL
    for name in grads:  # every tensor, not only the whole
        err = relative_error(grads[name], want_grads[name])
        assert err < GRAD_RTOL or float(want_grads[name].abs().max()) < 1e-12, (name, err)
    assert relative_error(flat(delta.values()), flat(want_delta.values())) < DELTA_RTOL


def test_grpo_update_matches_the_float64_reference():
    from mua.train.rl_batch import group_relative_advantages, with_inputs

    temperature = 0.8
    algo, optim, parallel = _configs({"kind": "grpo", "loss": {"entropy_coef": 0.01}})
    rows = fixed_rows(GROUPS, N)
    masks = _masks(rows)

    per_row = grpo_advantages(rows, algo.eps)
    want_adv = [(a * torch.tensor(r.loss_mask)).tolist() for a, r in zip(per_row, rows)]
    batch = scored_samples(rows, algo, N)
    tokens, _ = group_relative_advantages(batch, algo)
    assert relative_error(torch.cat(tokens), torch.tensor(sum(want_adv, []))) < 1e-6

    lm = reference_lm()
    with torch.no_grad():
        current = [scored(lm, r.token_ids, temperature)[0] for r in rows]
    behaviour = _noisy(current, masks, seed=2)
    samples = with_inputs(batch.samples, tokens, behaviour, None)

    parts = trainer_parts(optim, parallel, optimizer_steps=1)
    model = parts[0]
    before = named_params(model)
    result = one_rank_update(parts, None, samples, algo, optim, parallel, GROUPS * N, temperature)
    delta = {k: p.detach() - before[k] for k, p in model.named_parameters()}

    want = _reference_policy_step(rows, want_adv, behaviour, algo, optim, temperature)
    assert result.metrics["optimizer_steps"] == 1.0
    assert result.metrics["actor/clip_frac"] > 0.1  # the ratio clip acts on this batch
    assert want[1] > 2 * optim.grad_clip  # and so does the gradient clip
    _assert_step_matches(result.metrics, named_grads(model), delta, want)


def test_ppo_update_with_critic_matches_the_float64_reference():
    from mua.train.critic import gae_advantages
    from mua.train.rl_batch import with_inputs

    algo, optim, parallel = _configs(
        {
            "kind": "ppo",
            "gamma": 0.9,
            "lam": 0.95,
            "value_clip": 0.2,
            "critic_lr": 2e-3,
            "loss": {"dual_clip": 3.0},
        }
    )
    rows = fixed_rows(GROUPS, N, seed=1)
    masks = _masks(rows)
    batch = scored_samples(rows, algo, N)
    critic = trainer_critic(algo, optim, parallel, optimizer_steps=1)

    lm = reference_lm()
    head = critic.model.value_head
    ref_critic = ReferenceCritic(lm, head.weight.detach(), head.bias.detach())
    with torch.no_grad():
        current_values = [ref_critic.values(r.token_ids) for r in rows]
        current_logp = [scored(lm, r.token_ids)[0] for r in rows]
    # the trainer's critic computes the same values (the trainer's packed, float32 forward)
    values = critic.values(batch.samples, parallel.micro_batch_tokens, torch.device("cpu"))
    assert relative_error(torch.cat(values), torch.cat(current_values)) < 1e-5

    old_values = _noisy(current_values, masks, seed=3)  # values at sampling time
    got = gae_advantages(batch.samples, old_values, algo)
    raw = [
        gae(turn_rewards_on_tokens(r), v, r.loss_mask, algo.gamma, algo.lam)
        for r, v in zip(rows, old_values, strict=True)
    ]
    want_adv = whiten([a for a, _ in raw], [r.loss_mask for r in rows], algo.eps)
    want_ret = [ret for _, ret in raw]
    flat_list = lambda rows: torch.cat([torch.as_tensor(r, dtype=torch.float64) for r in rows])  # noqa: E731
    assert relative_error(flat_list(got.advantages), flat_list(want_adv)) < 1e-6
    assert relative_error(flat_list(got.returns), flat_list(want_ret)) < 1e-6

    behaviour = _noisy(current_logp, masks, seed=4)
    samples = with_inputs(batch.samples, got.advantages, behaviour, None, old_values, got.returns)
    parts = trainer_parts(optim, parallel, optimizer_steps=1)
    model = parts[0]
    before = named_params(model)
    critic_before = named_params(critic.model)
    result = one_rank_update(parts, critic, samples, algo, optim, parallel, GROUPS * N, 1.0)
    delta = {k: p.detach() - before[k] for k, p in model.named_parameters()}

    # the critic's float64 step: clipped value loss, token mean, gradient clip, its own AdamW
    params = dict(ref_critic.named_parameters())
    start = {k: p.detach().clone() for k, p in params.items()}
    tokens = sum(float(m.sum()) for m in masks)
    vf = torch.zeros((), dtype=torch.float64)
    for r, old, ret, mask in zip(rows, old_values, want_ret, masks, strict=True):
        v = ref_critic.values(r.token_ids)
        terms = clipped_value_loss(
            v, torch.tensor(old, dtype=torch.float64), torch.tensor(ret), algo.value_clip
        )
        vf = vf + (terms * mask).sum()
    vf = vf / tokens
    vf.backward()
    critic_norm = clip_gradients(list(params.values()), optim.grad_clip)
    critic_grads = {k: p.grad.clone() for k, p in params.items()}
    AdamW(params.values(), optim.betas, optim.weight_decay).step(algo.critic_lr)
    critic_delta = {k: params[k].detach() - start[k] for k in params}

    def as_reference(name: str) -> str:
        return name.replace("value_head.", "head.", 1).replace("model.", "decoder.", 1)

    got_critic_grads = {as_reference(k): v for k, v in named_grads(critic.model).items()}
    got_critic_delta = {
        as_reference(k): p.detach() - critic_before[k] for k, p in critic.model.named_parameters()
    }
    _assert_step_matches(
        {
            "critic/loss": result.metrics["critic/vf_loss"],
            "critic/grad_norm": result.metrics["critic/grad_norm"],
        },
        got_critic_grads,
        got_critic_delta,
        (vf.item(), critic_norm, critic_grads, critic_delta),
        prefix="critic/",
    )

    want = _reference_policy_step(rows, want_adv, behaviour, algo, optim, 1.0)
    assert result.metrics["actor/clip_frac"] > 0.1
    _assert_step_matches(result.metrics, named_grads(model), delta, want)
