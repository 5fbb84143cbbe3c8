"""mua's side of the update reference tests: the trainer's model, optimizer, schedule and critic
built as `mua train` builds them on one CPU rank, and the fixed batch turned into `RLSample`s
through the trainer's own scoring (`mua.train.rl_batch.score`).

One process, no torchrun: `mua.distributed` runs its collectives as identities without a process
group, and one float32 rank leaves the model unsharded (`mua.distributed.fsdp.needs_fsdp`), as a real
one-rank run does. The float64 side is `tests/unit/update_reference.py`.
"""

from __future__ import annotations

from types import SimpleNamespace

import torch

from tests.unit.update_reference import MODEL, Row


def one_rank():
    from mua.distributed import DistInfo

    return DistInfo(rank=0, world_size=1, local_rank=0, device=torch.device("cpu"), backend="gloo")


def one_rank_update(parts, critic, samples, algo, optim, parallel, global_batch, temperature):
    """One `mua.train.policy_update.update` of the policy on one CPU rank, as the trainer calls it
    (no reference model; old log-probs from the samples). `parts`: (model, optimizer, scheduler)."""
    from mua.train.policy_update import update

    return update(
        *parts,
        critic,
        samples,
        algo=algo,
        parallel=parallel,
        grad_clip=optim.grad_clip,
        global_batch=global_batch,
        temperature=temperature,
        dist=one_rank(),
        train_policy=True,
        with_ref=False,
        old_from_forward=False,
    )


def trainer_parts(optim, parallel, optimizer_steps: int, seed: int = 0):
    """(model, optimizer, scheduler) as the Trainer builds them (`load_trained_lm`: packed-row
    attention and the trainer's norms; `build_optimizer`: fused AdamW; `build_scheduler`)."""
    from mua.train.optim import build_optimizer, build_scheduler
    from mua.train.trained_model import load_trained_lm

    torch.manual_seed(seed)
    model = load_trained_lm(recipe_view(parallel, seed), "cpu")
    optimizer = build_optimizer(model.parameters(), optim)
    scheduler = build_scheduler(optimizer, optim, optimizer_steps)
    return model, optimizer, scheduler


def recipe_view(parallel, seed: int = 0):
    """The parts of a train recipe that building the trained model reads."""
    from mua.config.model import ModelConfig

    return SimpleNamespace(model=ModelConfig(path=MODEL, seed=seed), parallel=parallel)


def trainer_critic(algo, optim, parallel, optimizer_steps: int, head_seed: int = 1):
    """The PPO critic as the trainer builds it, its value head then set to seeded non-zero
    weights (zero-initialised, it would pass no gradient to the decoder on a first step)."""
    from mua.train.critic import build_critic
    from mua.train.trained_model import load_trained_lm

    mesh = SimpleNamespace(device_type="cpu", size=lambda: 1)
    critic = build_critic(
        load_trained_lm(recipe_view(parallel), "cpu"),
        algo=algo,
        optim=optim,
        parallel=parallel,
        mesh=mesh,
        optimizer_steps=optimizer_steps,
    )
    gen = torch.Generator().manual_seed(head_seed)
    head = critic.model.value_head
    with torch.no_grad():
        head.weight.copy_(torch.randn(head.weight.shape, generator=gen) * 0.1)
        head.bias.fill_(0.05)
    return critic


def scored_samples(rows: list[Row], algo, n: int):
    """The rows as finished trajectories through the trainer's scoring: (ScoredBatch, samples)."""
    from mua.rollout.token_record import TokenRecord
    from mua.train.rl_batch import score

    trajectories = [
        SimpleNamespace(
            token_ids=r.token_ids,
            loss_mask=r.loss_mask,
            turn_index=r.turn_index,
            turn_rewards=r.turn_rewards,
            logprobs=[0.0] * len(r.token_ids),
            record=TokenRecord(
                token_ids=list(r.token_ids),
                loss_mask=list(r.loss_mask),
                logprobs=[0.0] * len(r.token_ids),
                turn_index=list(r.turn_index),
            ),
            termination="done",
            group_id=f"{r.group}:task-{r.group}",
            sample_index=r.sample,
        )
        for r in rows
    ]
    batch = score(trajectories, algo, rank=0, world_size=1, n=n)
    assert len(batch.samples) == len(rows)
    return batch


def named_grads(model) -> dict[str, torch.Tensor]:
    return {n: p.grad.detach().clone() for n, p in model.named_parameters()}


def named_params(model) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in model.named_parameters()}
