"""What the RL step works with, built once per run: engine, policy client, gym, reference, critic.

`build_rl_parts` assembles them, each from its own config section: the engine from `rollout`,
`model` and `parallel` (`mua.train.engine_sync`), the gym context from `gym`, `user` and `data`,
the reference model when `algo.kl.coef` > 0 (with LoRA, the policy with its adapters
disabled), and the advantage strategy of `algo.kind` with its
critic for PPO (`mua.train.advantages`). `SeededPolicy` seeds every request so 1 and N ranks
draw the same rollouts. Not here: the step itself (`mua.train.rl`).
"""

from __future__ import annotations

import hashlib
from collections import Counter
from dataclasses import dataclass

from mua.rollout.policies import EnginePolicy


class SeededPolicy(EnginePolicy):
    """An EnginePolicy whose every request is seeded by (seed, step, global task, sample, turn).

    The runner's route key is `"{local task position}:{task id}/{sample}"`; the local position is
    mapped back to the global one so the seed does not depend on how tasks were dealt to ranks.
    """

    def __init__(
        self,
        engine,
        rollout_cfg,
        tool_parser,
        *,
        seed: int,
        rank: int,
        world_size: int,
        temperature: float | None = None,
    ):
        super().__init__(
            engine,
            temperature=rollout_cfg.temperature if temperature is None else temperature,
            top_p=rollout_cfg.top_p,
            top_k=rollout_cfg.top_k,
            tool_parser=tool_parser,
        )
        self.base_seed, self.rank, self.world_size = seed, rank, world_size
        self.step = 0
        self._turns: Counter = Counter()

    def start_step(self, step: int) -> None:
        self.step = step
        self._turns.clear()

    def request_seed(self, route_key: str) -> int:
        head, sample = route_key.rsplit("/", 1)
        local_pos = int(head.split(":", 1)[0])
        global_pos = local_pos * self.world_size + self.rank
        turn = self._turns[route_key]
        self._turns[route_key] += 1
        text = f"{self.base_seed}/{self.step}/{global_pos}/{sample}/{turn}".encode()
        return int.from_bytes(hashlib.sha256(text).digest()[:8], "little") & (2**62 - 1)


@dataclass
class RLParts:
    """What the RL step needs besides the Trainer's model/optimizer/sampler."""

    engine: object
    sync: object  # mua.train.engine_sync.EngineSync: wake/sleep, weight push, probe
    policy: SeededPolicy
    gym: object
    gym_ctx: object
    test_tasks: list
    advantages: object  # mua.train.advantages.GroupRelative | CriticGAE
    ref_model: object | None = None
    critic: object | None = None  # mua.train.critic.Critic (PPO)


def build_rl_parts(recipe, dist, policy_model, tokenizer, optimizer_steps: int) -> RLParts:
    """Every RL component of a run on this rank (collective: engines and models are sharded or
    shared across ranks)."""
    from mua.gym import GymContext, get_gym
    from mua.rollout.llm_client import make_llm_client
    from mua.train.advantages import build_advantages
    from mua.train.data import load_task_files
    from mua.train.engine_sync import build_engine_sync, memory_preflight
    from mua.train.trained_model import AdaptersDisabled, load_policy, load_trained_lm

    r = recipe
    gym = get_gym(r.gym.name)
    ctx = GymContext(
        options=dict(r.gym.options),
        reward_weights=dict(r.gym.reward_weights),
        user_kind=r.user.kind,
        llm=make_llm_client(r.user),
        seed=r.data.seed,
    )
    if r.rollout.engine == "sglang" and dist.device.type == "cuda":
        import torch

        gpu_bytes = torch.cuda.get_device_properties(dist.device).total_memory
        memory_preflight(r, policy_model, dist.world_size, gpu_bytes, show=dist.is_main)
    sync = build_engine_sync(r.rollout, r.model, r.parallel, dist, policy_model, tokenizer)
    policy = SeededPolicy(
        sync.engine,
        r.rollout,
        r.model.tool_parser,
        seed=r.data.seed,
        rank=dist.rank,
        world_size=dist.world_size,
    )
    test_tasks = (
        [t for f in load_task_files(r.data.test_files, r.eval.max_tasks) for t in f]
        if r.data.test_files
        else []
    )
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
    )
    return RLParts(
        engine=sync.engine,
        sync=sync,
        policy=policy,
        gym=gym,
        gym_ctx=ctx,
        test_tasks=test_tasks,
        advantages=advantages,
        ref_model=ref,
        critic=critic,
    )
