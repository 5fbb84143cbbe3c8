"""The PPO critic: a value head (one Linear) on the last hidden state of the policy architecture.

`ValueModel` is a fresh copy of the policy's decoder plus a zero-initialised Linear(hidden, 1),
FSDP2-sharded and trained by its own AdamW at `algo.critic_lr`; its `.logits` are the values, so
the packed helpers run it unchanged. Token i's value comes from the hidden state at i − 1.
`gae_advantages` gives values, whitened GAE advantages and returns; `Critic.train_mini_batch` one
clipped value-loss step. Not here: a separate critic architecture (refused), choosing GRPO or GAE.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace

import torch
from torch import nn

from mua.algo import (
    aggregate,
    gae_over_policy_tokens,
    kl_in_reward,
    kl_penalty,
    place_turn_rewards,
    value_loss,
)
from mua.distributed import all_reduce_sum
from mua.distributed.fsdp import clip_grad_norm, shard_model
from mua.errors import UsageError
from mua.train.packed_batch import concat_per_token, first_token_mask
from mua.train.packed_forward import accumulate, forward_only


class ValueModel(nn.Module):
    def __init__(self, causal_lm: nn.Module):
        super().__init__()
        self.model = getattr(
            causal_lm, causal_lm.base_model_prefix
        )  # the decoder, without the LM head
        self.config = causal_lm.config
        self.value_head = nn.Linear(causal_lm.config.hidden_size, 1)
        nn.init.zeros_(self.value_head.weight)
        nn.init.zeros_(self.value_head.bias)

    def forward(self, input_ids, position_ids=None, use_cache=False, **attention_kwargs):
        hidden = self.model(
            input_ids=input_ids, position_ids=position_ids, use_cache=False, **attention_kwargs
        ).last_hidden_state
        return SimpleNamespace(logits=self.value_head(hidden))  # [1, T, 1]


def aligned_values(values_col: torch.Tensor, lengths: list[int]) -> torch.Tensor:
    """[T, 1] head outputs -> [T] values of the tokens (shifted by one, 0 at sequence starts)."""
    v = values_col[:, 0]
    shifted = torch.cat([v.new_zeros(1), v[:-1]])
    return shifted * first_token_mask(lengths, v.device)


@dataclass
class Critic:
    model: nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: object

    def values(self, samples, micro_batch_tokens: int, device) -> list[torch.Tensor]:
        """Each sample's value of every token (aligned like log-probs), without gradients."""

        def per_mb(mb, out):
            return list(torch.split(aligned_values(out, mb.lengths).cpu(), mb.lengths))

        return forward_only(
            self.model, [s.token_ids for s in samples], micro_batch_tokens, device, per_mb
        )

    def train_mini_batch(
        self, mini, algo, *, micro_batch_tokens: int, grad_clip: float, device, world_size: int
    ) -> tuple[dict[str, float], float]:
        """One clipped value-loss optimizer step; returns (stats, this pass's value loss)."""
        masks = [s.tensors.loss_mask for s in mini]
        tokens = float(all_reduce_sum([sum(int(m[1:].sum()) for m in masks)])[0])
        passes = algo.epochs * algo.mini_batches

        def loss_fn(mb, out):
            mask = concat_per_token(masks, mb.indices, device=device) * first_token_mask(
                mb.lengths, device
            )
            new = aligned_values(out.float(), mb.lengths)
            old = concat_per_token([s.values for s in mini], mb.indices, device=device)
            ret = concat_per_token([s.returns for s in mini], mb.indices, device=device)
            losses, _ = value_loss(new, old, ret, mask, algo.value_clip)
            loss = aggregate(losses, mask, "token-mean", global_token_count=tokens)
            return loss * world_size, {"critic/vf_loss": float(loss.detach()) / passes}

        self.optimizer.zero_grad(set_to_none=True)
        stats = accumulate(
            self.model, [s.token_ids for s in mini], micro_batch_tokens, device, loss_fn
        )
        pass_loss = float(all_reduce_sum([sum(st["critic/vf_loss"] for st in stats) * passes])[0])
        grad_norm = clip_grad_norm(self.model, grad_clip)
        self.optimizer.step()
        self.scheduler.step()
        out = {"critic/grad_norm": grad_norm / passes / max(world_size, 1)}
        for st in stats:
            for k, v in st.items():
                out[k] = out.get(k, 0.0) + v
        return out, pass_loss


def epoch_losses(pass_losses: list[float], mini_batches: int) -> dict[str, float]:
    """Mean value loss of the step's first and last epoch (same data: the drop shows learning)."""
    if not pass_losses:
        return {}
    first, last = pass_losses[:mini_batches], pass_losses[-mini_batches:]
    return {
        "critic/vf_loss_first_epoch": sum(first) / len(first),
        "critic/vf_loss_last_epoch": sum(last) / len(last),
    }


def build_critic(lm: nn.Module, *, algo, optim, parallel, mesh, optimizer_steps: int) -> Critic:
    """The critic of `algo.critic` on `lm` (the trainer's copy of the policy's LM), with its own
    optimizer at `algo.critic_lr` and the optim section's schedule."""
    from mua.train.optim import build_optimizer, build_scheduler

    if algo.critic != "value_head":
        raise UsageError(
            f"algo.critic={algo.critic} is not available yet; use algo.critic=value_head"
        )
    model = shard_model(
        ValueModel(lm),
        mesh,
        mixed_precision=parallel.mixed_precision,
        activation_checkpointing=False,
        cpu_offload=parallel.cpu_offload,
    )
    optimizer = build_optimizer(model.parameters(), optim, lr=algo.critic_lr)
    scheduler = build_scheduler(optimizer, optim, optimizer_steps)
    return Critic(model, optimizer, scheduler)


def _global_whiten(
    rows: list[torch.Tensor], masks: list[torch.Tensor], eps: float
) -> list[torch.Tensor]:
    """Whiten advantages over every policy token of the step on every rank (mean 0, unbiased std 1)."""
    picked = [a[m.bool()].double() for a, m in zip(rows, masks, strict=False)]
    total, sq, count = all_reduce_sum(
        [
            sum(float(p.sum()) for p in picked),
            sum(float((p * p).sum()) for p in picked),
            sum(p.numel() for p in picked),
        ]
    ).tolist()
    if count < 2:
        return rows
    mean = total / count
    var = (sq - count * mean * mean) / (count - 1)
    scale = (var + eps) ** -0.5
    return [
        torch.where(m.bool(), (a - mean) * scale, torch.zeros_like(a))
        for a, m in zip(rows, masks, strict=False)
    ]


@dataclass(frozen=True)
class GAEResult:
    advantages: list[torch.Tensor]  # whitened, per token of each sample
    values: list[torch.Tensor]
    returns: list[torch.Tensor]


def _row(values) -> torch.Tensor:
    """[1, L] float32 of one sample's per-token values (a tensor or a list)."""
    return torch.as_tensor(values, dtype=torch.float32)[None]


def gae_advantages(
    samples, values: list[torch.Tensor], algo, old_logprobs=None, ref_logprobs=None
) -> GAEResult:
    """Token rewards (+ KL in the reward when both log-prob lists are given), GAE over policy
    tokens, whitening over the whole step (collective)."""
    advs, masks, returns = [], [], []
    for i, (s, v) in enumerate(zip(samples, values, strict=True)):
        mask = _row(s.tensors.loss_mask)  # [1, L]
        rewards = place_turn_rewards([s.turn_rewards], s.tensors.turn_index[None], mask)
        if ref_logprobs is not None:
            kl = kl_penalty(_row(old_logprobs[i]), _row(ref_logprobs[i]), algo.kl.estimator)
            rewards = kl_in_reward(rewards, kl, algo.kl.coef, mask)
        adv, ret = gae_over_policy_tokens(rewards, _row(v), mask, algo.gamma, algo.lam)
        returns.append(ret[0])
        advs.append(adv[0])
        masks.append(mask[0])
    whitened = _global_whiten(advs, masks, algo.eps)
    return GAEResult(advantages=whitened, values=values, returns=returns)
