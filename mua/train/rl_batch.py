"""Turn one step's Trajectories into training samples, and GRPO's group-relative advantages.

All local to a rank (every GRPO group lives on one). `score` excludes trajectories
(`filters.termination_mask`; with `algo.dynamic_sampling`, groups left with equal scores or fewer
than 2) and makes one `RLSample` per kept trajectory (or segment) with policy tokens, each with its
`global_index`, which decides its mini-batch whatever the number of ranks.
`group_relative_advantages` baselines over kept trajectories only (a lone kept member gets 0).
Samples are frozen: `with_inputs` returns new ones carrying log-probs, advantages and PPO's values
(per-token tensors, as the update reads them).
Nothing here runs a model or talks to other ranks.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import torch

from mua.algo import (
    grpo_token_advantages,
    termination_mask,
    trajectory_scores,
    zero_variance_groups,
)
from mua.rollout.token_record import RecordTensors, TokenRecord


@dataclass(frozen=True, eq=False)  # tensors: compared by identity
class RLSample:
    """One trained sequence: its span of a trajectory's `TokenRecord` (with the cleaned loss
    mask; `routes` padded to its length), read through the properties, its per-token numbers as
    tensors (`tensors`, made once), and the per-token tensors the update adds (None: not set)."""

    record: TokenRecord
    turn_rewards: list[float]
    global_index: int  # position in the step's global batch: task position × n + sample index
    advantages: torch.Tensor | None = None
    old_logprobs: torch.Tensor | None = None
    ref_logprobs: torch.Tensor | None = None
    values: torch.Tensor | None = None  # PPO: critic values at sampling time
    returns: torch.Tensor | None = None  # PPO: GAE returns
    tensors: RecordTensors | None = None  # `record.to_tensors()` when not given

    def __post_init__(self):
        if self.tensors is None:
            object.__setattr__(self, "tensors", self.record.to_tensors())

    token_ids = property(lambda self: self.record.token_ids)
    loss_mask = property(lambda self: self.record.loss_mask)
    turn_index = property(lambda self: self.record.turn_index)
    engine_logprobs = property(lambda self: self.record.logprobs)
    routes = property(lambda self: self.record.routes)  # MoE: [T, layers, k] or None


@dataclass
class BatchReport:
    """Counts of what the filters did, for the step's metrics (local to this rank)."""

    excluded_by_termination: int = 0
    dropped_zero_variance_groups: int = 0
    dropped_zero_variance_trajectories: int = 0
    no_policy_tokens: int = 0


def global_index(
    group_id: str, sample_index: int, rank: int, world_size: int, n: int | list[int]
) -> int:
    """Global batch position of a trajectory whose group id is `"{local task position}:{task id}"`.

    Tasks of a step are dealt to ranks strided (`rank_slice`), so local position p on rank r is
    global task position p × world_size + r. `n` is the group size, or each global task's group
    size when gyms differ in it (a task's samples then follow the samples of all earlier tasks).
    """
    local_pos = int(group_id.split(":", 1)[0])
    task = local_pos * world_size + rank
    if isinstance(n, int):
        return task * n + sample_index
    return sum(n[:task]) + sample_index


def _clean_mask(traj) -> list[int]:
    """The loss mask without tokens of a turn that has no recorded reward (a turn cut by a failure)."""
    num_turns = len(traj.turn_rewards)
    return [
        m if 0 <= t < num_turns else 0
        for m, t in zip(traj.loss_mask, traj.turn_index, strict=False)
    ]


def keep_mask(trajectories, algo, report: BatchReport) -> list[bool]:
    """Which trajectories enter the loss (termination reasons and, optionally, dynamic sampling)."""
    by_reason = (
        termination_mask([t.termination for t in trajectories], algo.mask_truncated).bool().tolist()
    )
    report.excluded_by_termination = sum(1 for k in by_reason if not k)
    keep = list(by_reason)
    if algo.dynamic_sampling and trajectories:
        scores = trajectory_scores(
            [t.turn_rewards for t in trajectories], getattr(algo, "score", "sum"), algo.gamma
        )
        group_ids = [t.group_id for t in trajectories]
        flat = zero_variance_groups(scores, group_ids, valid=by_reason).tolist()
        dropped = {g for g, k, z in zip(group_ids, by_reason, flat, strict=True) if k and z}
        report.dropped_zero_variance_groups = len(dropped)
        report.dropped_zero_variance_trajectories = sum(
            1 for k, z in zip(keep, flat, strict=False) if k and z
        )
        keep = [k and not z for k, z in zip(keep, flat, strict=False)]
    return keep


@dataclass(frozen=True)
class ScoredBatch:
    """A rank's trajectories after exclusion: what the advantage strategies and the update read.

    `kept` are the trajectories that enter the loss and the group baselines (GRPO's groups include
    kept trajectories whose policy tokens were all masked); `samples` are the kept ones with at
    least one policy token, `rows[i]` being the position of `samples[i]` in `kept`."""

    kept: list
    masks: list[list[int]]  # the cleaned loss mask of each kept trajectory
    samples: list[RLSample]
    rows: list[int]
    report: BatchReport
    # where `samples[i]` lies in its trajectory's per-token lists: a trajectory with `segments`
    # (a program gym's session that split) gives one sample per segment; empty: whole trajectories
    spans: list[tuple[int, int]] = field(default_factory=list)
    # the trajectories `termination_mask` excluded: they tell a group that exclusion left with one
    # member (no baseline, advantage 0) from a group of one by design; they enter no baseline
    excluded: list = field(default_factory=list)


def score(trajectories, algo, *, rank: int, world_size: int, n: int | list[int]) -> ScoredBatch:
    """Exclusions, then one sample per kept trajectory that has policy tokens (no advantages yet)."""
    report = BatchReport()
    keep = keep_mask(trajectories, algo, report)
    kept = [t for t, k in zip(trajectories, keep, strict=False) if k]
    by_reason = termination_mask([t.termination for t in trajectories], algo.mask_truncated)
    excluded = [t for t, k in zip(trajectories, by_reason.tolist(), strict=True) if not k]
    masks = [_clean_mask(t) for t in kept]
    samples, rows, spans = [], [], []
    for row, (traj, mask) in enumerate(zip(kept, masks, strict=True)):
        if sum(mask) == 0:
            report.no_policy_tokens += 1
            continue
        for start, end in segment_spans(traj):
            if sum(mask[start:end]) == 0:
                continue
            rows.append(row)
            spans.append((start, end))
            samples.append(
                RLSample(
                    traj.record.slice(start, end, loss_mask=mask[start:end]),
                    list(traj.turn_rewards),
                    global_index(traj.group_id, traj.sample_index, rank, world_size, n),
                )
            )
    return ScoredBatch(kept, masks, samples, rows, report, spans, excluded)


def segment_spans(traj) -> list[tuple[int, int]]:
    """(start, end) of each sample a trajectory's per-token lists hold: its `segments`, else one."""
    lengths = list(getattr(traj, "segments", None) or []) or [len(traj.token_ids)]
    out, start = [], 0
    for length in lengths:
        out.append((start, start + length))
        start += length
    return out


def _rows_by_gym(batch: ScoredBatch) -> dict[str, list[tuple[object, list[int], int | None]]]:
    """Each gym's (trajectory, loss mask, row in `kept`) rows: the kept trajectories, then the
    excluded ones (row None, an all-zero mask: they only mark who is missing from a group)."""
    out: dict[str, list] = {}
    for i, (t, mask) in enumerate(zip(batch.kept, batch.masks, strict=True)):
        out.setdefault(getattr(t, "gym", ""), []).append((t, mask, i))
    for t in batch.excluded:
        out.setdefault(getattr(t, "gym", ""), []).append((t, [0] * len(t.turn_index), None))
    return out


def group_relative_advantages(
    batch: ScoredBatch, algo, gym_algos: dict | None = None, reward_scale=None
) -> tuple[list[torch.Tensor], list[float]]:
    """GRPO token advantages of each sample and the advantage of every kept trajectory.

    Baselines are taken over the kept trajectories (`algo.pipeline.grpo_token_advantages` with the
    recipe's score/advantage/credit); excluded ones enter no baseline, and a kept trajectory whose
    group they left with no other kept member gets advantage 0. With several gyms,
    `gym_algos[label]` (score/credit/gamma of that entry) and `reward_scale(label)` (its reward
    standardisation) apply to that gym's trajectories; a group never spans gyms, so each gym's
    trajectories are scored on their own."""
    if not batch.kept:
        return [], []
    gym_algos = gym_algos or {}
    token_adv: list = [None] * len(batch.kept)
    traj_adv: list[float] = [0.0] * len(batch.kept)
    for label, rows in _rows_by_gym(batch).items():
        a = gym_algos.get(label, algo)
        scale = reward_scale(label) if reward_scale is not None else 1.0
        rewards = [t.turn_rewards for t, _, _ in rows]
        if scale != 1.0:
            rewards = [[r * scale for r in turns] for turns in rewards]
        out = grpo_token_advantages(
            rewards,
            [t.group_id for t, _, _ in rows],
            [torch.tensor(t.turn_index) for t, _, _ in rows],
            [torch.tensor(mask) for _, mask, _ in rows],
            score=a.score,
            advantage=a.advantage,
            credit=a.credit,
            gamma=a.gamma,
            eps=a.eps,
            valid=[i is not None for _, _, i in rows],
        )
        for j, (_, _, i) in enumerate(rows):
            if i is not None:
                token_adv[i] = out.token_advantages[j]
                traj_adv[i] = float(out.trajectory_advantages[j])
    if not batch.spans:
        return [token_adv[row] for row in batch.rows], traj_adv
    tokens = [token_adv[row][a:b] for row, (a, b) in zip(batch.rows, batch.spans, strict=True)]
    return tokens, traj_adv


def with_inputs(
    samples: list[RLSample],
    advantages: list[torch.Tensor],
    old_logprobs: list[torch.Tensor] | None,
    ref_logprobs: list[torch.Tensor] | None,
    values: list[torch.Tensor] | None = None,
    returns: list[torch.Tensor] | None = None,
) -> list[RLSample]:
    """New samples carrying what the update reads, one tensor per sample (None: that field
    stays None)."""
    fields = {
        "advantages": advantages,
        "old_logprobs": old_logprobs,
        "ref_logprobs": ref_logprobs,
        "values": values,
        "returns": returns,
    }
    return [
        replace(s, **{k: None if v is None else v[i] for k, v in fields.items()})
        for i, s in enumerate(samples)
    ]


def mini_batch_of(sample: RLSample, global_batch: int, num_mini_batches: int) -> int:
    """Mini-batch id of a sample: contiguous slices of the global batch (rank-count independent)."""
    per = max(1, global_batch // num_mini_batches)
    return min(sample.global_index // per, num_mini_batches - 1)


def split_mini_batches(
    samples: list[RLSample], global_batch: int, num_mini_batches: int
) -> list[list[RLSample]]:
    out: list[list[RLSample]] = [[] for _ in range(num_mini_batches)]
    for s in samples:
        out[mini_batch_of(s, global_batch, num_mini_batches)].append(s)
    return out
