"""A plain float64 reference of mua's RL optimizer step, written from the formulas of
docs/algorithms.md, and the fixed batches the reference tests feed to both.

Nothing here imports `mua.algo` or mua's trainer code: the reference model is the Hugging Face
model itself (eager attention, transformers' own norms, whole logits, one sequence at a time) in
float64, and the losses, advantages, gradient clipping, AdamW and the learning-rate schedule are
written out below. The only mua import is `load_model`, so both sides start from the same weights.
The batch is seeded and built here (token ids, loss masks, turns, rewards, behaviour log-probs),
never stored numbers from some machine: what the tests compare is mua's float32 update against
this float64 one on the same inputs, within a relative tolerance.
"""

from __future__ import annotations

import copy
import math
import random
from dataclasses import dataclass

import torch

MODEL = "tiny:qwen3-1m"
VOCAB = 2000
ADAM_EPS = 1e-8  # torch's AdamW default, which mua's optimizer keeps


# ---- the fixed batch ---------------------------------------------------------------------------


@dataclass
class Row:
    """One trajectory: tokens, which ones the policy sampled, their turn, the turn rewards."""

    token_ids: list[int]
    loss_mask: list[int]
    turn_index: list[int]
    turn_rewards: list[float]
    group: int
    sample: int


def fixed_rows(groups: int = 2, n: int = 4, seed: int = 0) -> list[Row]:
    """`groups` tasks × `n` samples: a shared prompt per task, then two or three turns of
    sampled tokens (mask 1) separated by user tokens (mask 0), and a seeded reward per turn."""
    rng = random.Random(seed)
    rows = []
    for g in range(groups):
        prompt = [rng.randrange(3, VOCAB) for _ in range(rng.randint(6, 10))]
        for s in range(n):
            ids, mask, turn = list(prompt), [0] * len(prompt), [-1] * len(prompt)
            turns = rng.randint(2, 3)
            for t in range(turns):
                if t:
                    user = rng.randint(2, 5)
                    ids += [rng.randrange(3, VOCAB) for _ in range(user)]
                    mask += [0] * user
                    turn += [-1] * user
                said = rng.randint(3, 8)
                ids += [rng.randrange(3, VOCAB) for _ in range(said)]
                mask += [1] * said
                turn += [t] * said
            rewards = [float(rng.choice([0.0, 0.0, 0.5, 1.0])) for _ in range(turns)]
            rows.append(Row(ids, mask, turn, rewards, g, s))
    return rows


# ---- the float64 models ------------------------------------------------------------------------


def reference_lm(seed: int = 0):
    """The tiny model as Hugging Face builds it (eager attention), in float64."""
    from mua.models import load_model

    return load_model(MODEL, dtype="float32", seed=seed, attn_implementation="eager").double()


class ReferenceCritic(torch.nn.Module):
    """The policy's decoder plus a Linear(hidden, 1) value head, in float64."""

    def __init__(self, lm, head_weight: torch.Tensor, head_bias: torch.Tensor):
        super().__init__()
        self.decoder = copy.deepcopy(getattr(lm, lm.base_model_prefix))
        self.head = torch.nn.Linear(head_weight.shape[1], 1).double()
        with torch.no_grad():
            self.head.weight.copy_(head_weight.double())
            self.head.bias.copy_(head_bias.double())

    def values(self, ids: list[int]) -> torch.Tensor:
        """V_i for every token: the head on the hidden state before token i; V_0 = 0."""
        hidden = self.decoder(input_ids=torch.tensor([ids])).last_hidden_state[0]
        out = self.head(hidden)[:, 0]
        return torch.cat([out.new_zeros(1), out[:-1]])


def scored(lm, ids: list[int], temperature: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """(log p(token_i | tokens_<i), entropy of that distribution) for i ≥ 1, 0 at position 0."""
    logits = lm(input_ids=torch.tensor([ids])).logits[0] / temperature
    logp_all = torch.log_softmax(logits, dim=-1)
    picked = logp_all[:-1].gather(-1, torch.tensor(ids[1:])[:, None])[:, 0]
    entropy = -(logp_all[:-1].exp() * logp_all[:-1]).sum(-1)
    zero = picked.new_zeros(1)
    return torch.cat([zero, picked]), torch.cat([zero, entropy])


# ---- formulas (docs/algorithms.md) --------------------------------------------------------------


def grpo_advantages(rows: list[Row], eps: float) -> list[float]:
    """§1 `mean` score, §2 `grpo`: (S − mean_g S) / (unbiased std_g S + ε), one per row."""
    scores = [sum(r.turn_rewards) / len(r.turn_rewards) for r in rows]
    out = []
    for r, s in zip(rows, scores, strict=True):
        group = [x for q, x in zip(rows, scores, strict=True) if q.group == r.group]
        mean = sum(group) / len(group)
        std = math.sqrt(sum((x - mean) ** 2 for x in group) / (len(group) - 1))
        out.append((s - mean) / (std + eps))
    return out


def gae(rewards: list[float], values: list[float], mask: list[int], gamma: float, lam: float):
    """§4 GAE over the sampled tokens only (others carry no value and do not advance time):
    (advantages, returns), 0 off the mask."""
    adv, ret = [0.0] * len(mask), [0.0] * len(mask)
    next_value, running = 0.0, 0.0
    for i in reversed(range(len(mask))):
        if not mask[i]:
            continue
        delta = rewards[i] + gamma * next_value - values[i]
        running = delta + gamma * lam * running
        adv[i], ret[i] = running, running + values[i]
        next_value = values[i]
    return adv, ret


def turn_rewards_on_tokens(row: Row) -> list[float]:
    """§4: each turn's reward on the last sampled token of that turn."""
    out = [0.0] * len(row.token_ids)
    for t, reward in enumerate(row.turn_rewards):
        last = max(i for i, (m, k) in enumerate(zip(row.loss_mask, row.turn_index)) if m and k == t)
        out[last] += reward
    return out


def whiten(per_row: list[list[float]], masks: list[list[int]], eps: float) -> list[list[float]]:
    """Masked mean 0 and unbiased variance 1 over every sampled token (ε added to the variance)."""
    picked = [a for adv, m in zip(per_row, masks, strict=True) for a, k in zip(adv, m) if k]
    mean = sum(picked) / len(picked)
    var = sum((a - mean) ** 2 for a in picked) / (len(picked) - 1)
    scale = 1.0 / math.sqrt(var + eps)
    return [
        [(a - mean) * scale if k else 0.0 for a, k in zip(adv, m, strict=True)]
        for adv, m in zip(per_row, masks, strict=True)
    ]


def clipped_policy_loss(logp, old, adv, clip_low, clip_high, dual_clip=None):
    """§5: −min(r·A, clip(r, 1 − ε_low, 1 + ε_high)·A), the loss of A < 0 capped at −c·A."""
    ratio = torch.exp(logp - old)
    loss = -torch.minimum(ratio * adv, ratio.clamp(1 - clip_low, 1 + clip_high) * adv)
    if dual_clip is not None:
        loss = torch.where(adv < 0, torch.minimum(loss, -dual_clip * adv), loss)
    return loss


def clipped_value_loss(values, old, returns, clip):
    """§4: ½·max((V − R)², (clip(V, V_old − c, V_old + c) − R)²)."""
    clipped = old + (values - old).clamp(-clip, clip)
    return 0.5 * torch.maximum((values - returns) ** 2, (clipped - returns) ** 2)


# ---- the optimizer step ------------------------------------------------------------------------


def clip_gradients(params, max_norm: float | None) -> float:
    """Scale every gradient by max_norm / (‖g‖ + 1e-6) when that is below 1; returns ‖g‖."""
    norm = math.sqrt(sum(float((p.grad**2).sum()) for p in params))
    if max_norm is not None:
        coef = max_norm / (norm + 1e-6)
        if coef < 1:
            for p in params:
                p.grad.mul_(coef)
    return norm


class AdamW:
    """Decoupled weight decay, then Adam's bias-corrected moments (Loshchilov & Hutter)."""

    def __init__(self, params, betas, weight_decay):
        self.params = list(params)
        self.betas, self.wd = betas, weight_decay
        self.m = [torch.zeros_like(p) for p in self.params]
        self.v = [torch.zeros_like(p) for p in self.params]
        self.t = 0

    @torch.no_grad()
    def step(self, lr: float) -> None:
        self.t += 1
        b1, b2 = self.betas
        for p, m, v in zip(self.params, self.m, self.v, strict=True):
            g = p.grad
            p.mul_(1 - lr * self.wd)
            m.mul_(b1).add_((1 - b1) * g)
            v.mul_(b2).add_((1 - b2) * g * g)
            m_hat = m / (1 - b1**self.t)
            v_hat = v / (1 - b2**self.t)
            p.sub_(lr * m_hat / (v_hat.sqrt() + ADAM_EPS))


def lr_at(step: int, peak: float, warmup: int, schedule: str, total: int) -> float:
    """The learning rate of optimizer step `step` (0-based): linear warm-up to the peak, then
    constant, linear decay to 0 or a half cosine to 0 over the remaining steps."""
    if warmup and step < warmup:
        return peak * (step + 1) / warmup
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    if schedule == "linear":
        return peak * (1 - progress)
    if schedule == "cosine":
        return peak * 0.5 * (1 + math.cos(math.pi * progress))
    return peak


# ---- comparisons -------------------------------------------------------------------------------


def relative_error(got: torch.Tensor, want: torch.Tensor) -> float:
    """‖got − want‖ / ‖want‖ over flattened tensors (float64)."""
    got, want = got.double().flatten(), want.double().flatten()
    return float((got - want).norm() / want.norm().clamp(min=1e-300))


def flat(tensors) -> torch.Tensor:
    return torch.cat([t.detach().double().flatten() for t in tensors])
