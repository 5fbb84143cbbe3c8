"""The RL step of `mua train` (GRPO, and PPO with `mua.train.critic`), run identically on every rank.

`rl_step` reads like the loop it implements:

    engine.wake -> rollouts of this rank's share of the step's tasks -> engine.sleep
    -> exclusions, scores, advantages (mua.algo) -> old/reference log-probs (trainer forward)
    -> policy (and critic) updates over epochs × mini-batches -> engine weights marked stale
    -> metrics, transcripts, validation when due

Design choices:
- The engine and its co-operation with the trainer live in `mua.train.engine_sync`: `hf` (a private
  copy of the policy per rank) or `sglang` (a server shared by ranks). After each update the
  weights are marked stale and pushed lazily, right before the next rollout or validation.
- A step's tasks are dealt to ranks strided, so each task's n samples (its GRPO group) stay on one
  rank. Sampling is seeded per (data.seed, step, global task position, sample, turn), never per
  rank, so 1 and N ranks draw the same rollouts.
- Old log-probs are recomputed by the trainer model before the update when the policy moves within
  a step (epochs or mini-batches > 1); with one epoch of one mini-batch they are the update
  forward's own, detached. The engine's log-probs are only compared with them
  (`logp_diff_engine_vs_trainer`).
- Loss normalisers (policy tokens, sequences) are summed over all micro-batches and ranks of a
  mini-batch, so the update does not depend on the micro-batch budget or the number of ranks.
Not here: checkpoint writing (the Trainer's loop), building engines and pushing weights
(`mua.train.engine_sync`).
"""

from __future__ import annotations

import hashlib
import time
from collections import Counter
from dataclasses import dataclass

import torch

from mua.algo import aggregate, kl_penalty, policy_loss
from mua.dist import all_gather_objects, all_reduce_sum
from mua.dist.fsdp import clip_grad_norm
from mua.rollout.policies import EnginePolicy
from mua.rollout.users import user_call_report
from mua.train.data import rank_slice
from mua.train.micro import accumulate, forward_only
from mua.train.packing import concat_per_token, first_token_mask, scored_logprobs
from mua.train.rl_batch import RLSample, build_samples, split_mini_batches


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
    sync: object  # mua.train.engine_sync.EngineSync: wake/sleep, lazy weight push, probe
    policy: SeededPolicy
    gym: object
    gym_ctx: object
    test_tasks: list
    ref_model: object | None = None
    critic: object | None = None  # mua.train.critic.Critic (PPO)


def build_rl_parts(trainer) -> RLParts:
    from mua.gym import GymContext, get_gym
    from mua.rollout.users import make_llm_client
    from mua.train.data import load_task_files
    from mua.train.engine_sync import build_engine_sync
    from mua.train.modeling import load_policy

    r, dist = trainer.recipe, trainer.dist
    gym = get_gym(r.gym.name)
    ctx = GymContext(
        options=dict(r.gym.options),
        reward_weights=dict(r.gym.reward_weights),
        user_kind=r.user.kind,
        llm=make_llm_client(r.user),
        seed=r.data.seed,
    )
    sync = build_engine_sync(trainer)
    engine = sync.engine
    policy = SeededPolicy(
        engine,
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
    ref = load_policy(r, dist.mesh, trainable=False) if r.algo.kl.coef > 0 else None
    return RLParts(
        engine=engine,
        sync=sync,
        policy=policy,
        gym=gym,
        gym_ctx=ctx,
        test_tasks=test_tasks,
        ref_model=ref,
    )


# ---- the step ------------------------------------------------------------------------------


def rl_step(trainer, step: int) -> dict[str, float]:
    """One RL step on this rank (collective: every rank calls it with the same step)."""
    r, dist, parts = trainer.recipe, trainer.dist, trainer.rl
    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    tasks = rank_slice(
        trainer.sampler.next_tasks(r.data.tasks_per_step), dist.rank, dist.world_size
    )
    progress = trainer.tracker.rollout_progress(step, len(tasks) * r.rollout.n)
    trajectories = collect(
        parts, tasks, step, trainer.tokenizer, r.rollout, r.rollout.n, progress=progress
    )
    sync_metrics = parts.sync.take_metrics()  # the push before the rollouts, the probe
    timings["time/weight_push_s"] = sync_metrics.pop("time/weight_push_s")
    timings["time/rollout_s"] = time.perf_counter() - t0 - timings["time/weight_push_s"]

    t0 = time.perf_counter()
    is_ppo = r.algo.kind == "ppo"
    samples, report = build_samples(
        trajectories,
        r.algo,
        rank=dist.rank,
        world_size=dist.world_size,
        n=r.rollout.n,
        with_advantages=not is_ppo,
    )
    fill_logprobs(trainer, samples)
    if is_ppo:
        from mua.train.critic import ppo_advantages

        ppo_advantages(trainer, samples)
        report.trajectory_advantages = [  # for the advantage metrics: mean over each sample's policy tokens
            sum(a * m for a, m in zip(s.advantages, s.loss_mask, strict=False))
            / max(sum(s.loss_mask), 1)
            for s in samples
        ]
    timings["time/prepare_s"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    update_stats = update(
        trainer,
        samples,
        train_policy=not is_ppo or step > getattr(r.algo, "critic_warmup_steps", 0),
    )
    timings["time/update_s"] = time.perf_counter() - t0

    parts.sync.mark_stale()  # pushed right before the engine is next used

    metrics = {**rollout_metrics(trajectories, samples, report), **update_stats, **timings}
    metrics.update(sync_metrics)
    user_calls = user_call_report(parts.gym_ctx.llm)  # this rank's LLM user since the last step
    if user_calls:  # retries, 429s, timed-out attempts, failures: summed over ranks
        totals = all_reduce_sum(list(user_calls.values())).tolist()
        metrics.update({f"user/{k[5:]}": v for k, v in zip(user_calls, totals, strict=True)})
    metrics["tokens_per_s"] = metrics["tokens/total"] / max(sum(timings.values()), 1e-9)
    log_transcripts(trainer, step, trajectories)
    if r.eval.test_freq and step % r.eval.test_freq == 0 and parts.test_tasks:
        metrics.update(validate(trainer))
        val_sync = parts.sync.take_metrics()  # validation's own push and probe
        metrics["time/weight_push_s"] += val_sync["time/weight_push_s"]
        if "engine/probe_logp_diff" in val_sync:
            metrics["engine/probe_logp_diff"] = max(
                metrics.get("engine/probe_logp_diff", 0.0), val_sync["engine/probe_logp_diff"]
            )
    return metrics


# ---- phases --------------------------------------------------------------------------------


def collect(
    parts: RLParts, tasks, step: int, tokenizer, rollout_cfg, n: int, policy=None, progress=None
) -> list:
    """Wake the engine (pushing stale weights), roll out n samples of each task, put it to sleep."""
    from mua.rollout.runner import run_rollouts

    policy = policy or parts.policy
    policy.start_step(step)

    async def go():
        if not tasks:
            return []
        return await run_rollouts(
            tasks,
            n=n,
            policy=policy,
            gym_spec=parts.gym,
            gym_ctx=parts.gym_ctx,
            tokenizer=tokenizer,
            rollout_cfg=rollout_cfg,
            progress=progress,
        )

    return parts.sync.run(go)


def reuses_update_forward(trainer) -> bool:
    """True when old log-probs can come from the update's own forward (detached).

    With one epoch of one mini-batch the policy has not moved between sampling and the update, so
    the extra forward would compute exactly the update forward's values (the ratio is 1, as in
    TRL with num_iterations = 1); KL placed in the reward needs them before the update."""
    algo = trainer.recipe.algo
    kl_in_reward = trainer.rl.ref_model is not None and algo.kl.placement == "reward"
    return algo.epochs == 1 and algo.mini_batches == 1 and not kl_in_reward


def fill_logprobs(trainer, samples: list[RLSample]) -> None:
    """Old log-probs from the trainer's policy (unless the update's forward provides them, see
    `reuses_update_forward`) and reference log-probs when KL is on."""
    r = trainer.recipe
    temperature = _temperature(r.rollout)
    seqs = [s.token_ids for s in samples]
    budget, device = r.parallel.micro_batch_tokens, trainer.dist.device

    masks = [s.loss_mask for s in samples]
    share = r.parallel.share_prefixes

    def logps(model):
        def per_mb(mb, logits):
            lp = scored_logprobs(logits, mb, temperature)[0].cpu()
            return list(torch.split(lp, mb.lengths))

        return forward_only(model, seqs, budget, device, per_mb, masks=masks, share_prefixes=share)

    if not reuses_update_forward(trainer):
        for s, lp in zip(samples, logps(trainer.model), strict=False):
            s.old_logprobs = lp.tolist()
    if trainer.rl.ref_model is not None:
        for s, lp in zip(samples, logps(trainer.rl.ref_model), strict=False):
            s.ref_logprobs = lp.tolist()


def update(trainer, samples: list[RLSample], train_policy: bool = True) -> dict[str, float]:
    """Epochs × mini-batches of optimizer steps on the policy (and the critic, for PPO)."""
    r = trainer.recipe
    global_batch = r.data.tasks_per_step * r.rollout.n
    totals: Counter = Counter()
    grad_norms, lrs = [], []
    for _ in range(r.algo.epochs):
        for mini in split_mini_batches(samples, global_batch, r.algo.mini_batches):
            if trainer.rl.critic is not None:
                totals.update(trainer.rl.critic.train_mini_batch(trainer, mini))
            if not train_policy:
                continue
            stats, grad_norm = policy_mini_batch(trainer, mini)
            totals.update(stats)
            grad_norms.append(grad_norm)
            lrs.append(trainer.optimizer.param_groups[0]["lr"])
            trainer.optimizer.step()
            trainer.scheduler.step()
    out = _update_metrics(totals, grad_norms, lrs)
    if trainer.rl.critic is not None:
        out.update(trainer.rl.critic.epoch_losses(r.algo.mini_batches))
    return out


def policy_mini_batch(trainer, mini: list[RLSample]) -> tuple[Counter, float]:
    """Accumulate the policy loss of one mini-batch over micro-batches; returns (stat sums, grad norm)."""
    r, world = trainer.recipe, trainer.dist.world_size
    algo, device = r.algo, trainer.dist.device
    temperature = _temperature(r.rollout)
    masks = [s.loss_mask for s in mini]
    local_tokens = sum(sum(m[1:]) for m in masks)
    local_seqs = sum(1 for m in masks if sum(m[1:]) > 0)
    tokens, seqs = (float(x) for x in all_reduce_sum([local_tokens, local_seqs]))
    kl_in_loss = trainer.rl.ref_model is not None and algo.kl.placement == "loss"
    old_from_forward = reuses_update_forward(trainer)

    def loss_fn(mb, logits):
        mask = concat_per_token(masks, mb.indices, device=device) * first_token_mask(
            mb.lengths, device
        )
        adv = concat_per_token([s.advantages for s in mini], mb.indices, device=device)
        logp, entropy = scored_logprobs(
            logits, mb, temperature, entropy_grad=bool(algo.loss.entropy_coef)
        )
        if old_from_forward:
            old = logp.detach()
            for i, lp in zip(mb.indices, torch.split(old.cpu(), mb.lengths), strict=True):
                mini[i].old_logprobs = lp.tolist()
        else:
            old = concat_per_token([s.old_logprobs for s in mini], mb.indices, device=device)
        kl = None
        if kl_in_loss:
            ref = concat_per_token([s.ref_logprobs for s in mini], mb.indices, device=device)
            kl = kl_penalty(logp, ref, algo.kl.estimator)
        losses, st = policy_loss(
            logp,
            old,
            adv,
            mask,
            algo.loss.clip_low,
            algo.loss.clip_high,
            algo.loss.dual_clip,
            entropy=entropy,
            entropy_coef=algo.loss.entropy_coef,
            kl=kl,
            kl_coef=algo.kl.coef if kl_in_loss else 0.0,
        )
        seq_index = torch.repeat_interleave(
            torch.arange(len(mb.lengths), device=device), torch.tensor(mb.lengths, device=device)
        )
        loss = aggregate(
            losses,
            mask,
            algo.loss.aggregation,
            algo.loss.norm_length,
            global_token_count=tokens,
            global_seq_count=seqs,
            seq_index=seq_index,
        )
        n_tok = float(st["tokens"])
        out = {"loss": float(loss.detach()), "mb_tokens": n_tok}
        for key in ("pg_loss", "clip_frac", "approx_kl", "ratio_mean", "entropy", "kl"):
            if key in st:
                out[f"sum/{key}"] = float(st[key]) * n_tok
        return loss * world, out

    trainer.optimizer.zero_grad(set_to_none=True)
    stats = accumulate(
        trainer.model,
        [s.token_ids for s in mini],
        r.parallel.micro_batch_tokens,
        device,
        loss_fn,
        masks=masks,
        share_prefixes=r.parallel.share_prefixes,
    )
    grad_norm = clip_grad_norm(trainer.model, r.optim.grad_clip)
    totals: Counter = Counter()
    for st in stats:
        totals.update(st)
    return totals, grad_norm


# ---- metrics, transcripts, validation ------------------------------------------------------


def _temperature(rollout_cfg) -> float:
    return rollout_cfg.temperature if rollout_cfg.temperature > 0 else 1.0


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
    }


def rollout_metrics(trajectories, samples: list[RLSample], report) -> dict[str, float]:
    """Step metrics over every rank's trajectories (one small object gather)."""
    local_diff = [
        (abs(e - o), m)
        for s in samples
        for e, o, m in zip(s.engine_logprobs, s.old_logprobs, s.loss_mask, strict=False)
        if m
    ]
    local = {
        "trajs": [_traj_summary(t) for t in trajectories],
        "adv": report.trajectory_advantages,
        "diff": (
            sum(d for d, _ in local_diff),
            len(local_diff),
            max((d for d, _ in local_diff), default=0.0),
        ),
        "excluded": report.excluded_by_termination,
        "zv_groups": report.dropped_zero_variance_groups,
        "zv_trajs": report.dropped_zero_variance_trajectories,
        "samples": len(samples),
        "trained_tokens": sum(sum(s.loss_mask) for s in samples),
    }
    parts = all_gather_objects(local)
    trajs = [t for p in parts for t in p["trajs"]]
    adv = torch.tensor([a for p in parts for a in p["adv"]] or [0.0], dtype=torch.float64)
    num = max(len(trajs), 1)
    out = {
        "reward/mean": sum(t["reward"] for t in trajs) / num,
        "reward/success_rate": sum(t["success"] for t in trajs) / num,
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
        "advantage/mean": float(adv.mean()),
        "advantage/std": float(adv.std()) if adv.numel() > 1 else 0.0,
        "advantage/max": float(adv.max()),
        "advantage/min": float(adv.min()),
    }
    for reason, count in Counter(t["termination"] for t in trajs).items():
        out[f"termination/{reason}"] = float(count)
    diff_sum, diff_n = sum(p["diff"][0] for p in parts), sum(p["diff"][1] for p in parts)
    out["logp_diff_engine_vs_trainer"] = diff_sum / max(diff_n, 1)
    out["logp_diff_engine_vs_trainer_max"] = max(p["diff"][2] for p in parts)
    return out


def _update_metrics(totals: Counter, grad_norms: list[float], lrs: list[float]) -> dict[str, float]:
    keys = [k for k in totals if k == "loss" or k.startswith(("sum/", "critic/", "mb_tokens"))]
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
        if k.startswith("critic/"):
            out[k] = v
    return out


def log_transcripts(trainer, step: int, trajectories) -> None:
    count = trainer.recipe.track.transcripts_per_step
    if not count or not trainer.dist.is_main:
        return
    trainer.tracker.log_transcripts(step, trajectories[:count], trainer.tokenizer)


def validate(trainer) -> dict[str, float]:
    """Held-out evaluation through the shared evaluation runner, gathered over all ranks.

    Each rank evaluates its slice of the test tasks with `mua.eval.runner.evaluate` (the code
    `mua eval` runs); rows are gathered and summarised once, so the numbers do not depend on the
    number of ranks. Returns the summary's numbers under `val/`.
    """
    from mua.eval.metrics import flat_metrics, summarize
    from mua.eval.runner import evaluate

    r, dist, parts = trainer.recipe, trainer.dist, trainer.rl
    tasks = rank_slice(parts.test_tasks, dist.rank, dist.world_size)
    policy = SeededPolicy(
        parts.engine,
        r.rollout,
        r.model.tool_parser,
        seed=r.data.seed + 1,
        rank=dist.rank,
        world_size=dist.world_size,
        temperature=r.eval.temperature,
    )

    async def go():
        return await evaluate(
            tasks,
            policy=policy,
            gym_spec=parts.gym,
            gym_ctx=parts.gym_ctx,
            tokenizer=trainer.tokenizer,
            rollout_cfg=r.rollout,
            n=r.eval.n,
            k_values=r.eval.k,
            success_threshold=r.eval.success_threshold,
        )

    rows = [{k: v for k, v in row.items() if k != "messages"} for row in parts.sync.run(go).rows]
    every_row = [row for part in all_gather_objects(rows) for row in part]
    k_values = sorted({k for k in (1, r.eval.n, *r.eval.k) if 1 <= k <= r.eval.n})
    summary = summarize(every_row, k_values, [str(t.task_id) for t in parts.test_tasks])
    return {
        key.replace("all/", "val/", 1): value
        for key, value in flat_metrics({"all": summary}).items()
    }
