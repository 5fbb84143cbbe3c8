"""The RL step of `mua train` (GRPO, and PPO), run identically on every rank.

`rl_step(step, recipe=, dist=, state=, parts=, sampler=, tracker=)` reads top to bottom as the
loop it implements, each phase a function timed by one `StepTimer`: rollout (`partial_rollout`
when `rollout.oversample` > 1), score, log-probs (old only when the policy moves within the step),
advantages, update, push (`EngineSync.push_weights`), then metrics, transcripts and validation.
Samples are frozen; every phase returns what it computed. Phases, files and the ranks'
invariants: docs/architecture.md. Not here: the loop and checkpoints (`mua.train.loop`), building
the parts (`mua.train.rl_setup`), metrics (`mua.train.rl_metrics`), validation.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import TYPE_CHECKING

import torch

from mua.algo.filters import FAILURE_REASONS
from mua.distributed import all_gather_objects, all_reduce_sum
from mua.errors import RunFailure
from mua.llm.llm_client import user_call_report
from mua.train.advantage_strategy import LogProbs
from mua.train.packed_forward import forward_only
from mua.train.policy_update import sample_replay, update
from mua.train.rl_batch import RLSample, score, with_inputs
from mua.train.rl_metrics import log_transcripts, rollout_metrics, routing_metrics
from mua.train.rl_setup import PolicyState, RLParts
from mua.train.rl_validation import validate
from mua.train.step_timer import StepTimer

if TYPE_CHECKING:
    from mua.config.recipes import TrainRecipe
    from mua.distributed import DistInfo
    from mua.track.tracker import Tracker
    from mua.train.mix_sampler import MixSampler


def rl_step(
    step: int,
    *,
    recipe: TrainRecipe,
    dist: DistInfo,
    state: PolicyState,
    parts: RLParts,
    sampler: MixSampler,
    tracker: Tracker,
) -> dict[str, float]:
    """One RL step on this rank (collective: every rank calls it with the same step)."""
    r, algo, parallel = recipe, recipe.algo, recipe.parallel
    timer = StepTimer(always=("rollout", "weight_push", "prepare", "update"))
    step_start, busy_start = time.perf_counter(), _engine_busy_s(parts)
    with timer.phase("rollout"):  # wake (a stale sglang engine is pushed to), generate, sleep
        trajectories, group_sizes, async_metrics = rollout(
            step, recipe=r, dist=dist, state=state, parts=parts, sampler=sampler,
            tracker=tracker, timer=timer,
        )  # fmt: skip
    probe = parts.sync.take_metrics()
    feedback = observe_step(sampler, trajectories, r)

    with timer.phase("prepare"):
        n = r.rollout.n if set(group_sizes) <= {r.rollout.n} else group_sizes
        batch = score(trajectories, algo, rank=dist.rank, world_size=dist.world_size, n=n)
        check_trainable(trajectories, step, async_metrics.get("rollout/groups_dropped_failed", 0))
        old_from_update = reuses_update_forward(algo, parts.ref_model is not None)
        logprobs, routing = pre_update_logprobs(
            state.model, parts.ref_model, batch.samples, with_old=not old_from_update,
            temperature=sampling_temperature(r.rollout), parallel=parallel, device=dist.device,
            algo=algo,
        )  # fmt: skip
        advantages = parts.advantages.compute(batch, logprobs)
        samples = with_inputs(
            batch.samples, advantages.tokens, logprobs.old, logprobs.ref, advantages.values,
            advantages.returns,
        )  # fmt: skip

    with timer.phase("update"):
        result = update(
            state.model, state.optimizer, state.scheduler, parts.critic, samples,
            algo=algo, parallel=parallel, grad_clip=r.optim.grad_clip,
            global_batch=sum(group_sizes), temperature=sampling_temperature(r.rollout), dist=dist,
            train_policy=algo.kind != "ppo" or step > algo.critic_warmup_steps,
            with_ref=parts.ref_model is not None, old_from_forward=old_from_update,
        )  # fmt: skip

    # The new weights to the engine: the hf engine copies them now (timed here); an sglang
    # server released its weight memory after the rollout, so it is pushed to in its next wake.
    parts.sync.push_weights(timer)
    idle = _idle_frac(parts, busy_start, step_start)
    old = logprobs.old if logprobs.old is not None else result.old_logprobs
    old = [lp.tolist() for lp in old] if old is not None else None
    labels = list(parts.runs) if len(parts.runs) > 1 else None
    metrics = {
        **rollout_metrics(
            trajectories, samples, batch.report, advantages.per_trajectory, old, labels=labels
        ),
        **feedback,
        **async_metrics,
        **result.metrics,
        **probe,
        **_user_call_metrics(parts),
        **idle,
        **routing_metrics(*(result.routing if old_from_update else routing), algo),
    }
    log_transcripts(
        tracker if dist.is_main else None, step, trajectories, r.track.transcripts_per_step,
        state.tokenizer,
    )  # fmt: skip
    if r.eval.test_freq and step % r.eval.test_freq == 0 and parts.test_tasks:
        _validate_into(
            metrics, recipe=r, dist=dist, parts=parts, state=state, tracker=tracker, timer=timer
        )
    metrics.update(timer.metrics())
    trained = sum(metrics[f"time/{k}_s"] for k in ("rollout", "weight_push", "prepare", "update"))
    metrics["tokens_per_s"] = metrics["tokens/total"] / max(trained, 1e-9)
    return metrics


# ---- phases --------------------------------------------------------------------------------


def _validate_into(metrics: dict, *, recipe, dist, parts, state, tracker, timer) -> None:
    """The held-out evaluation of this step into `metrics`, with the largest engine probe
    difference of the step's and validation's own wakes."""
    with timer.phase("validation"):
        metrics.update(
            validate(
                recipe=recipe, dist=dist, parts=parts, state=state, tracker=tracker, timer=timer
            )
        )
    val_probe = parts.sync.take_metrics()  # validation's own wake probes the engine
    if "engine/probe_logp_diff" in val_probe:
        metrics["engine/probe_logp_diff"] = max(
            metrics.get("engine/probe_logp_diff", 0.0), val_probe["engine/probe_logp_diff"]
        )


def rollout(
    step: int, *, recipe, dist, state, parts: RLParts, sampler, tracker, timer
) -> tuple[list, list[int], dict[str, float]]:
    """The rollout phase (`mua.train.partial_rollouts`; with `rollout.oversample` 1 every
    group completes in its step): this rank's trained trajectories, the step's group sizes by
    global task position, with oversampling the `async/...` metrics and with `rollout.retries`
    the `rollout/...` retry counts (over all ranks)."""
    from mua.train.partial_rollouts import retry_metrics, staleness_metrics

    r = recipe
    share = len(range(dist.rank, r.data.tasks_per_step, dist.world_size))
    out = parts.carry.rollout(
        sampler=sampler,
        tasks_per_step=r.data.tasks_per_step,
        runs=parts.runs,
        sync=parts.sync,
        policy=parts.policy,
        tokenizer=state.tokenizer,
        rollout_cfg=r.rollout,
        step=step,
        dist=dist,
        progress=tracker.rollout_progress(step, share * r.rollout.n),
        timer=timer,
    )
    metrics = retry_metrics(out.retries) if r.rollout.retries.max else {}
    if r.rollout.oversample <= 1.0:
        return out.trajectories, out.group_sizes, metrics
    if step == r.total_steps:  # groups in flight when the run ends are not trained
        out.counts["unfinished_at_end"] = out.counts["groups_carried"]
    gathered = all_gather_objects((out.staleness, out.counts))
    metrics.update(staleness_metrics([g[0] for g in gathered], [g[1] for g in gathered]))
    return out.trajectories, out.group_sizes, metrics


def check_trainable(trajectories, step: int, dropped_failed: float = 0) -> None:
    """Refuse a step that rolled out nothing on any rank (collective): its loss would be logged
    as 0 and the run would go on learning nothing; `dropped_failed` (every rank's groups dropped
    after their retries) names the likelier cause. A step whose trajectories were all excluded,
    dropped or without a policy token is a different case, which `stop.empty_steps` governs
    (`mua.train.guards.StepWatch`: one line a step, then a stop with one line)."""
    (count,) = (int(v) for v in all_reduce_sum([len(trajectories)]).tolist())
    if count == 0 and dropped_failed:
        raise RunFailure(
            f"step {step} trained no group: all {int(dropped_failed)} were dropped because a "
            "conversation still failed after its rollout.retries (the user or gym keeps "
            "failing); fix the endpoint or set rollout.retries.on_exhausted=mask_member"
        )
    if count == 0:
        raise RunFailure(
            f"step {step} rolled out no trajectories on any rank; check data.tasks_per_step "
            "and the gyms' task files"
        )


def _idle_frac(parts: RLParts, busy_start, step_start: float) -> dict[str, float]:
    """`engine/idle_frac` for the hf engine: the share of the step it had nothing to decode."""
    if busy_start is None:
        return {}
    busy = _engine_busy_s(parts) - busy_start
    return {"engine/idle_frac": max(0.0, 1.0 - busy / max(time.perf_counter() - step_start, 1e-9))}


def _engine_busy_s(parts: RLParts) -> float | None:
    """Seconds the hf engine's serving thread has spent admitting and decoding (None: another
    engine, which does not report it)."""
    stats = getattr(parts.sync.engine, "stats", None)
    return float(stats["busy_s"]) if isinstance(stats, dict) and "busy_s" in stats else None


def _user_call_metrics(parts: RLParts) -> dict[str, float]:
    """`user/...`: this rank's LLM users' retries, 429s, timed-out attempts and failures since
    the last step, summed over ranks (collective)."""
    user_calls = _user_calls(parts)
    if not user_calls:
        return {}
    totals = all_reduce_sum(list(user_calls.values())).tolist()
    return {f"user/{k[5:]}": v for k, v in zip(user_calls, totals, strict=True)}


def _user_calls(parts: RLParts) -> dict:
    """The LLM users' call counters since the last step, summed over the gyms' clients."""
    total: Counter = Counter()
    keys: list[str] = []
    for client in parts.llm_clients():
        report = user_call_report(client)
        for k, v in report.items():
            if k not in keys:
                keys.append(k)
            total[k] += v
    return {k: total[k] for k in keys}


def observe_step(sampler, trajectories, recipe) -> dict[str, float]:
    """Tell the sampler every scored trajectory's reward (gathered over ranks) when an entry has a
    curriculum or reward standardisation; returns their per-gym metrics. A masked trajectory (its
    user, gym or engine failed: `FAILURE_REASONS`) has no score, so it neither makes its task look
    hard nor enters the reward statistics; a truncated one is the policy's doing and counts."""
    labelled = {e.key for e in recipe.gyms if e.curriculum is not None or e.standardize_rewards}
    if not labelled:
        return {}
    local = [
        (t.gym or recipe.gyms[0].key, str(t.task_id), float(t.reward))
        for t in trajectories
        if t.termination not in FAILURE_REASONS
    ]
    rows = [row for part in all_gather_objects(local) for row in part]
    sampler.observe(rows)
    out: dict[str, float] = {}
    for label in labelled:
        for pool, count in sampler.pool_sizes(label).items():
            out[f"curriculum/{label}/{pool}"] = float(count)
        if label in sampler.standardize:
            out[f"train/{label}/reward_scale"] = sampler.reward_scale(label)
    return out


def reuses_update_forward(algo, with_ref: bool) -> bool:
    """True when old log-probs can come from the update's own forward (detached).

    With one epoch of one mini-batch the policy has not moved between sampling and the update, so
    the extra forward would compute exactly the update forward's values (the ratio is 1, as in
    TRL with num_iterations = 1); KL placed in the reward needs them before the update."""
    kl_in_reward = with_ref and algo.kl.placement == "reward"
    return algo.epochs == 1 and algo.mini_batches == 1 and not kl_in_reward


def pre_update_logprobs(
    model,
    ref_model,
    samples: list[RLSample],
    *,
    with_old: bool,
    temperature,
    parallel,
    device,
    algo=None,
) -> tuple[LogProbs, tuple[int, int]]:
    """Old log-probs from the trainer's policy (when `with_old`) and reference log-probs (when
    there is a reference model), one tensor per sample; with a mixture of experts' records,
    both forwards follow them under `algo.routing_replay: r3`, and the old forward's (token,
    layer) decisions compared with them and those that differ are returned ((0, 0) without)."""
    seqs = [s.token_ids for s in samples]
    masks = [s.loss_mask for s in samples]
    old_replay = sample_replay(samples, algo) if algo is not None else None

    def logps(m, replay) -> list[torch.Tensor]:
        def per_mb(mb, scores):
            return list(torch.split(scores[0].cpu(), mb.lengths))

        out = forward_only(
            m,
            seqs,
            parallel.micro_batch_tokens,
            device,
            per_mb,
            masks=masks,
            share_prefixes=parallel.share_prefixes,
            temperature=temperature,
            replay=replay,
        )
        return out

    out = LogProbs(
        old=logps(model, old_replay) if with_old else None,
        ref=logps(ref_model, sample_replay(samples, algo)) if ref_model is not None else None,
    )
    counted = (old_replay.compared, old_replay.differ) if with_old and old_replay else (0, 0)
    return out, counted


def sampling_temperature(rollout_cfg) -> float:
    """The temperature log-probs are scored at: the rollout's (greedy rollouts score at 1)."""
    return rollout_cfg.temperature if rollout_cfg.temperature > 0 else 1.0
