"""What the RL step works with, built once per run: engine, policy client, gym, reference, critic.

`build_rl_parts` assembles them, each from its own config section: the engine (`engine_sync`),
each gym's `GymRun` (`mua.gym.mix`), the reference model when `algo.kl.coef` > 0 (with LoRA, the
policy with adapters disabled) and the advantage strategy with its PPO critic
(`advantage_strategy`). `SeededPolicy` seeds every request so 1 and N ranks draw the same
rollouts. Not here: the step itself (`mua.train.rl`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from mua.rollout.policies import SeededPolicy

if TYPE_CHECKING:
    import torch

    from mua.gym.mix import GymRun
    from mua.train.advantage_strategy import CriticGAE, GroupRelative
    from mua.train.critic import Critic
    from mua.train.engine_sync import EngineSync
    from mua.train.partial_rollouts import PartialRollouts


@dataclass
class RLParts:
    """What the RL step works with besides the policy it trains (`PolicyState`)."""

    sync: EngineSync  # the engine; wake/sleep, weight push, probe
    policy: SeededPolicy
    runs: dict[str, GymRun]  # by gym label, in entry order
    carry: PartialRollouts  # the groups in flight (none carried with rollout.oversample 1)
    test_tasks: list  # every held-out task, in entry order
    advantages: GroupRelative | CriticGAE
    ref_model: torch.nn.Module | None = None
    critic: Critic | None = None  # PPO
    test_by_gym: dict[str, list] = field(default_factory=dict)  # label -> held-out tasks

    def llm_clients(self) -> list:
        """Each entry's LLM user client (None for scripted users), distinct ones once."""
        seen, out = set(), []
        for run in self.runs.values():
            if run.ctx.llm is not None and id(run.ctx.llm) not in seen:
                seen.add(id(run.ctx.llm))
                out.append(run.ctx.llm)
        return out


@dataclass(frozen=True)
class PolicyState:
    """The trained policy and what updates it: the step changes them in place (an optimizer
    step), never replaces them. Built by the Trainer, which checkpoints them."""

    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    tokenizer: object  # a transformers tokenizer: renders conversations, decodes transcripts


def held_out_tasks(recipe) -> dict[str, list]:
    """label -> held-out tasks (`eval.max_tasks` per entry): each entry's test files, else the
    rows of data.test_files naming its gym (`mua.gym.mix.entry_tasks`)."""
    from mua.gym.mix import entry_tasks

    r = recipe
    limit = r.eval.max_tasks
    by_gym = entry_tasks(r, "test", builtin=False)
    return {label: (ts[:limit] if limit else ts) for label, ts in by_gym.items() if ts}


def gym_algos(recipe) -> dict:
    """label -> the algo section with that entry's score/credit/gamma (only entries that set one)."""
    out = {}
    for entry in recipe.gyms:
        update = {k: getattr(entry, k) for k in ("score", "credit", "gamma")}
        update = {k: v for k, v in update.items() if v is not None}
        if update:
            out[entry.key] = recipe.algo.model_copy(update=update)
    return out


def build_rl_parts(
    recipe, dist, policy_model, tokenizer, optimizer_steps: int, sampler=None
) -> RLParts:
    """Every RL component of a run on this rank (collective: engines and models are sharded or
    shared across ranks). `sampler` (a MixSampler) gives the per-gym reward scales."""
    from mua.engines.registry import engine_memory_share
    from mua.run import entry_runs
    from mua.train.advantage_strategy import build_advantages
    from mua.train.engine_sync import build_engine_sync, memory_preflight
    from mua.train.partial_rollouts import PartialRollouts
    from mua.train.trained_model import AdaptersDisabled, load_policy, load_trained_lm

    r = recipe
    runs = {run.label: run for run in entry_runs(r)}
    reserves = engine_memory_share(r.rollout.engine, r.rollout) is not None
    if reserves and dist.device.type == "cuda":  # an engine holding a fixed share of each GPU
        import torch

        gpu_bytes = torch.cuda.get_device_properties(dist.device).total_memory
        memory_preflight(r, policy_model, dist.world_size, gpu_bytes, show=dist.is_main)
    sync = build_engine_sync(r.rollout, r.model, r.parallel, dist, policy_model, tokenizer)
    policy = SeededPolicy.for_rollout(sync.engine, r.rollout, r.model.tool_parser, seed=r.data.seed)
    test_by_gym = held_out_tasks(r)
    test_tasks = [t for ts in test_by_gym.values() for t in ts]
    ref = None
    if r.algo.kl.coef > 0:  # with LoRA: the policy with its adapters disabled, no second copy
        lora = r.model.lora is not None
        ref = (
            AdaptersDisabled(policy_model, dist.device)
            if lora
            else load_policy(r, dist.mesh, trainable=False)
        )
    critic = None
    if r.algo.kind == "ppo":
        from mua.train.critic import build_critic

        critic = build_critic(
            load_trained_lm(r),
            algo=r.algo,
            optim=r.optim,
            parallel=r.parallel,
            mesh=dist.mesh,
            optimizer_steps=optimizer_steps,
        )
    advantages = build_advantages(
        r.algo,
        critic=critic,
        kl_in_reward=ref is not None and r.algo.kl.placement == "reward",
        micro_batch_tokens=r.parallel.micro_batch_tokens,
        device=dist.device,
        gym_algos=gym_algos(r),
        reward_scale=sampler.reward_scale
        if sampler is not None and any(e.standardize_rewards for e in r.gyms)
        else None,
    )
    return RLParts(
        sync=sync,
        policy=policy,
        runs=runs,
        carry=PartialRollouts(r.rollout.oversample, r.algo.max_staleness),
        test_tasks=test_tasks,
        advantages=advantages,
        ref_model=ref,
        critic=critic,
        test_by_gym=test_by_gym,
    )
