"""The RL step's advantage strategies: group-relative (GRPO) or a learned critic with GAE (PPO).

Both take the step's `ScoredBatch` and the pre-update log-probs and return `Advantages`; the step
does not know which one it holds. `build_advantages` picks the one `algo.kind` asks for.
Not here: the formulas (`mua.algo`), the critic's model and its update (`mua.train.critic`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from mua.train.rl_batch import ScoredBatch, group_relative_advantages


@dataclass(frozen=True)
class LogProbs:
    """Log-probs of every sample's tokens before the update (None: not computed this step)."""

    old: list[torch.Tensor] | None
    ref: list[torch.Tensor] | None


@dataclass(frozen=True)
class Advantages:
    tokens: list[torch.Tensor]  # per token of each sample
    per_trajectory: list[float]  # one number per trajectory, for the step's advantage metrics
    values: list[torch.Tensor] | None = None  # PPO: the critic's values at sampling time
    returns: list[torch.Tensor] | None = None  # PPO: GAE returns, the critic's targets


@dataclass(frozen=True)
class GroupRelative:
    """GRPO: each trajectory's score against its group's (`mua.algo.grpo_token_advantages`)."""

    algo: object
    gym_algos: dict | None = None  # label -> that gym's algo (its score/credit/gamma)
    reward_scale: object = None  # label -> factor (per-gym reward standardisation), or None

    def compute(self, batch: ScoredBatch, logprobs: LogProbs) -> Advantages:
        tokens, per_trajectory = group_relative_advantages(
            batch, self.algo, self.gym_algos, self.reward_scale
        )
        return Advantages(tokens=tokens, per_trajectory=per_trajectory)


@dataclass(frozen=True)
class CriticGAE:
    """PPO: GAE over the critic's values, KL in the reward when `algo.kl.placement` says so,
    whitened over the whole step."""

    critic: object  # mua.train.critic.Critic
    algo: object
    kl_in_reward: bool
    micro_batch_tokens: int
    device: object

    def compute(self, batch: ScoredBatch, logprobs: LogProbs) -> Advantages:
        from mua.train.critic import gae_advantages

        samples = batch.samples
        values = self.critic.values(samples, self.micro_batch_tokens, self.device)
        kl = (logprobs.old, logprobs.ref) if self.kl_in_reward else (None, None)
        gae = gae_advantages(samples, values, self.algo, *kl)
        per_trajectory = [  # mean over each sample's policy tokens
            sum(a * m for a, m in zip(adv.tolist(), s.loss_mask, strict=False))
            / max(sum(s.loss_mask), 1)
            for adv, s in zip(gae.advantages, samples, strict=True)
        ]
        return Advantages(
            tokens=gae.advantages,
            per_trajectory=per_trajectory,
            values=gae.values,
            returns=gae.returns,
        )


def build_advantages(
    algo,
    *,
    critic,
    kl_in_reward: bool,
    micro_batch_tokens: int,
    device,
    gym_algos: dict | None = None,
    reward_scale=None,
):
    """The strategy of `algo.kind`: CriticGAE for ppo (with its critic), GroupRelative otherwise
    (with each gym's own scoring and reward scale, when the recipe has several gyms)."""
    if algo.kind == "ppo":
        return CriticGAE(critic, algo, kl_in_reward, micro_batch_tokens, device)
    return GroupRelative(algo, gym_algos, reward_scale)
