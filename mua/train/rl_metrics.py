"""The RL step's metrics: rollouts and filters (gathered over ranks), update sums, transcripts.

Every number is summed or gathered over all ranks, so a run logs the same metrics on 1 or N ranks.
Program gyms' gateway counters (`gateway/splits`, `gateway/requests`, ...) are summed over the
step's trajectories. A masked trajectory (its user, gym or engine failed: `FAILURE_REASONS`) has no score: reward and
success means leave it out and `reward/masked` (`train/<label>/masked`) counts it beside them; a
step or gym with nothing scored logs no reward at all rather than 0. Each reward component
(`reward/component/<name>`: a gym's named parts, the user seat's `fidelity` and `judge`) is
averaged over the scored trajectories that carry it.
Not here: computing anything the update uses.
"""

from __future__ import annotations

from collections import Counter

import torch

from mua.algo.filters import FAILURE_REASONS
from mua.distributed import all_gather_objects, all_reduce_sum
from mua.eval.summary import component_means
from mua.train.rl_batch import BatchReport, RLSample


def _traj_summary(t) -> dict:
    return {
        "reward": t.reward,
        "turns": t.num_turns,
        "tokens": len(t.token_ids),
        "assistant_tokens": int(t.metrics.get("assistant_tokens", 0)),
        "termination": t.termination,
        "parse_errors": t.metrics.get("parse_errors", 0.0),
        "drift": t.metrics.get("drift", 0.0),
        "success": float(t.reward > 0 and t.termination == "done"),
        "gym": getattr(t, "gym", ""),
        "masked": t.termination in FAILURE_REASONS,
        "gateway": {k: v for k, v in t.metrics.items() if k.startswith("gateway/")},
        "reward_components": dict(getattr(t, "reward_components", None) or {}),
    }


def reward_means(trajs: list[dict], prefix: str, reward_key: str, success_key: str) -> dict:
    """Reward and success means over the scored (not masked) trajectories, and the masked count;
    no mean at all when nothing was scored."""
    scored = [t for t in trajs if not t["masked"]]
    out = {f"{prefix}masked": float(len(trajs) - len(scored))}
    if scored:
        out[prefix + reward_key] = sum(t["reward"] for t in scored) / len(scored)
        out[prefix + success_key] = sum(t["success"] for t in scored) / len(scored)
    return out


def per_gym_metrics(trajs: list[dict], labels: list[str]) -> dict[str, float]:
    """`train/<label>/...` for each gym of a step: reward and success (scored trajectories only,
    absent when none was), masked, user failures and parse failures (counts), turns, tokens,
    truncation (share that hit max_turns or length), and the gym's share of the step's
    trajectories."""
    out: dict[str, float] = {}
    total = max(len(trajs), 1)
    for label in labels:
        mine = [t for t in trajs if t["gym"] == label]
        num = max(len(mine), 1)
        prefix = f"train/{label}/"
        out[prefix + "share"] = len(mine) / total
        if not mine:
            continue
        out.update(reward_means(mine, prefix, "reward", "success"))
        out[prefix + "turns"] = sum(t["turns"] for t in mine) / num
        out[prefix + "tokens"] = sum(t["tokens"] for t in mine) / num
        out[prefix + "truncated"] = (
            sum(1 for t in mine if t["termination"] in ("max_turns", "length")) / num
        )
        out[prefix + "user_failures"] = float(
            sum(1 for t in mine if t["termination"] == "user_failure")
        )
        out[prefix + "parse_failures"] = float(sum(t["parse_errors"] for t in mine))
    return out


def _has_signal(sample: RLSample) -> bool:
    """True when some policy token of the sample has a non-zero advantage (it moves the policy)."""
    adv = sample.advantages.tolist() if sample.advantages is not None else []
    return any(a != 0 and m for a, m in zip(adv, sample.loss_mask, strict=False))


def rollout_metrics(
    trajectories,
    samples: list[RLSample],
    report: BatchReport,
    trajectory_advantages: list[float],
    old_logprobs: list[list[float]] | None,
    labels: list[str] | None = None,
) -> dict[str, float]:
    """Step metrics over every rank's trajectories (one small object gather). `old_logprobs`
    (the trainer's, None when no policy update ran) are compared with the engine's. With
    `labels` (a run with several gyms) also each gym's `train/<label>/...`."""
    local_diff = [
        (abs(e - o), m)
        for s, old in zip(samples, old_logprobs or [[] for _ in samples], strict=True)
        for e, o, m in zip(s.engine_logprobs, old, s.loss_mask, strict=False)
        if m
    ]
    local = {
        "trajs": [_traj_summary(t) for t in trajectories],
        "adv": trajectory_advantages,
        "diff": (
            sum(d for d, _ in local_diff),
            len(local_diff),
            max((d for d, _ in local_diff), default=0.0),
        ),
        "excluded": report.excluded_by_termination,
        "zv_groups": report.dropped_zero_variance_groups,
        "zv_trajs": report.dropped_zero_variance_trajectories,
        "samples": len(samples),
        "with_signal": sum(1 for s in samples if _has_signal(s)),
        "trained_tokens": sum(sum(s.loss_mask) for s in samples),
    }
    parts = all_gather_objects(local)
    trajs = [t for p in parts for t in p["trajs"]]
    adv = torch.tensor([a for p in parts for a in p["adv"]] or [0.0], dtype=torch.float64)
    num = max(len(trajs), 1)
    out = {
        **reward_means(trajs, "reward/", "mean", "success_rate"),
        **{
            f"reward/component/{name}": mean
            for name, mean in component_means([t for t in trajs if not t["masked"]]).items()
        },
        "reward/scored": float(sum(1 for t in trajs if not t["masked"])),
        "rollout/turns_mean": sum(t["turns"] for t in trajs) / num,
        "rollout/tokens_mean": sum(t["tokens"] for t in trajs) / num,
        "rollout/parse_errors": float(sum(t["parse_errors"] for t in trajs)),
        "rollout/drift": float(sum(t["drift"] for t in trajs)),
        "tokens/total": float(sum(t["tokens"] for t in trajs)),
        "tokens/trained": float(sum(p["trained_tokens"] for p in parts)),
        "filter/excluded_by_termination": float(sum(p["excluded"] for p in parts)),
        "filter/zero_variance_groups": float(sum(p["zv_groups"] for p in parts)),
        "filter/zero_variance_trajectories": float(sum(p["zv_trajs"] for p in parts)),
        "filter/samples_trained": float(sum(p["samples"] for p in parts)),
        "filter/samples_with_signal": float(sum(p["with_signal"] for p in parts)),
        "advantage/mean": float(adv.mean()),
        "advantage/std": float(adv.std()) if adv.numel() > 1 else 0.0,
        "advantage/max": float(adv.max()),
        "advantage/min": float(adv.min()),
    }
    for reason, count in Counter(t["termination"] for t in trajs).items():
        out[f"termination/{reason}"] = float(count)
    gateway: Counter = Counter()
    for t in trajs:  # program gyms' sessions (`mua.gateway`): splits, requests, tokens (sums)
        gateway.update(t.get("gateway", {}))
    out.update({k: float(v) for k, v in gateway.items()})
    diff_sum, diff_n = sum(p["diff"][0] for p in parts), sum(p["diff"][1] for p in parts)
    out["logp_diff_engine_vs_trainer"] = diff_sum / max(diff_n, 1)
    out["logp_diff_engine_vs_trainer_max"] = max(p["diff"][2] for p in parts)
    if labels:
        out.update(per_gym_metrics(trajs, labels))
    return out


def update_metrics(totals: Counter, grad_norms: list[float], lrs: list[float]) -> dict[str, float]:
    keys = [
        k for k in totals if k == "loss" or k.startswith(("sum/", "critic/", "mb_tokens", "moe/"))
    ]
    summed = (
        dict(zip(keys, all_reduce_sum([totals[k] for k in keys]).tolist(), strict=False))
        if keys
        else {}
    )
    out: dict[str, float] = {}
    steps = max(len(grad_norms), 1)
    if grad_norms:
        out["loss"] = summed.get("loss", 0.0) / steps
        out["grad_norm"] = sum(grad_norms) / steps
        out["lr"] = lrs[-1]
        tokens = max(summed.get("mb_tokens", 0.0), 1.0)
        for k, v in summed.items():
            if k.startswith("sum/"):
                out[f"actor/{k[4:]}"] = v / tokens
    out["optimizer_steps"] = float(len(grad_norms))
    for k, v in summed.items():
        if k.startswith("moe/"):  # the routers' load-balancing loss: a mean per optimizer step
            out[k] = v / steps
    for k, v in summed.items():
        if k.startswith("critic/"):
            out[k] = v
    return out


def routing_metrics(compared: int, differ: int, algo) -> dict[str, float]:
    """`moe/routing_disagreement`: the share of (token, layer) decisions, over every rank, where
    the trainer's router chose other experts than the engine recorded, in the step's first
    forward at the sampling weights; `moe/routed_decisions` their count and `moe/routing_replay`
    1 when the trainer followed them (`algo.routing_replay: r3`). Nothing when no token had a
    record (collective)."""
    total, differ_sum = (float(x) for x in all_reduce_sum([compared, differ]).tolist())
    if total == 0:
        return {}
    return {
        "moe/routing_disagreement": differ_sum / total,
        "moe/routed_decisions": total,
        "moe/routing_replay": float(algo.routing_replay == "r3"),
    }


def log_transcripts(tracker, step: int, trajectories, count: int, tokenizer) -> None:
    """The first `count` trajectories of the step, to the tracker (rank 0 only)."""
    if not count or tracker is None:
        return
    tracker.log_transcripts(step, trajectories[:count], tokenizer)
