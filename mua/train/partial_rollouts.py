"""The rollout phase of every RL step: oversampled groups, carried over, bounded staleness.

`PartialRollouts.rollout` keeps ceil(`rollout.oversample` × its share) groups in flight per rank,
drops carried groups past `algo.max_staleness`, fills up with tasks dealt over ranks (`deal`),
advances them through `collect` until the rank has its share of complete groups, and hands those
to the step in draw order (docs/async_rl.md, "What a step does"). Oversampling 1 is the
synchronous step. `in_flight_tasks`/`requeue` carry groups over a checkpoint (their finished
samples' trajectories, token records and routes included; parked conversations start again);
`close` ends a run.
Not here: the conversations (`mua.rollout.collect`), the loss correction, writing checkpoints.
"""

from __future__ import annotations

import logging
import math
from collections import Counter
from dataclasses import dataclass, field, replace

from mua.algo import sample_staleness
from mua.background_loop import BackgroundLoop
from mua.distributed import all_gather_objects, all_reduce_sum
from mua.rollout.collect import Group, SeedKey, collect, discard_groups
from mua.rollout.trajectory import Trajectory

log = logging.getLogger("mua.train")


@dataclass
class StepRollouts:
    """What the asynchronous rollout phase hands the step on this rank."""

    trajectories: list  # the trained groups' trajectories, group by group, samples in order
    group_sizes: list[int]  # size of every trained group of the step, by global task position
    staleness: list[int]  # per trajectory
    counts: dict[str, float]  # local counts: started, carried, dropped, resumed
    retries: dict[str, float] = field(default_factory=dict)  # local: retries, exhausted, dropped


@dataclass
class PartialRollouts:
    """This rank's groups carried between steps."""

    oversample: float
    max_staleness: int
    carried: list[Group] = field(default_factory=list)
    next_key: int = 0
    # (label, task, finished samples' trajectories by index), the same on every rank
    requeued: list[tuple[str, object, dict]] = field(default_factory=list)
    loop: BackgroundLoop | None = None

    def background(self) -> BackgroundLoop:
        if self.loop is None:
            self.loop = BackgroundLoop()
        return self.loop

    def draw(self, sampler, k: int) -> tuple[list[tuple[str, object]], int]:
        """The next `k` tasks (the same on every rank): requeued ones first, then the sampler's;
        and how many of them were requeued."""
        again, self.requeued = self.requeued[:k], self.requeued[k:]
        fresh = sampler.next_labelled(k - len(again)) if k > len(again) else []
        return again + fresh, len(again)

    def requeue(self, entries: list[tuple]) -> None:
        """Groups that were in flight at a checkpoint, (label, task) or (label, task, {sample
        index: finished Trajectory}): started first by the next steps, their finished samples
        kept."""
        again = [(e[0], e[1], dict(e[2]) if len(e) > 2 else {}) for e in entries]
        self.requeued = again + self.requeued

    def in_flight_tasks(self, version: int = 0) -> list[tuple[str, str, dict]]:
        """(label, task id, finished) of every group in flight, over all ranks (collective): the
        requeued groups not started yet, then each rank's carried groups in rank order.
        `finished` maps each finished sample's index (as text) to its `Trajectory.to_dict()`,
        policy versions counted from `version` (the policy a checkpoint holds, which a resumed
        run numbers 0)."""
        mine = [
            (g.run.label, str(g.task.task_id), kept_finished(g.finished, version))
            for g in self.carried
        ]
        waiting = [
            (lb, str(t.task_id), kept_finished(done, version)) for lb, t, done in self.requeued
        ]
        return waiting + [entry for part in all_gather_objects(mine) for entry in part]

    def close(self) -> int:
        """Close every parked conversation's env, stop the loop; returns how many groups were
        still in flight on this rank. Safe to call twice."""
        unfinished, groups = len(self.carried), self.carried
        self.carried = []
        if self.loop is not None:
            # whatever still runs (a step interrupted, replies on their way) is cancelled first
            self.loop.close(then=discard_groups(groups))
            self.loop = None
        return unfinished

    def in_flight_target(self, share: int) -> int:
        return math.ceil(self.oversample * share - 1e-9)

    def split_stale(self, version: int) -> tuple[list[Group], list[Group]]:
        """(groups still within the bound when trained at `version`, groups past it)."""
        keep, stale = [], []
        for group in self.carried:
            oldest = group.oldest_version()
            too_old = oldest is not None and version - oldest > self.max_staleness
            (stale if too_old else keep).append(group)
        return keep, stale

    def start_groups(self, positioned, runs, step: int, version: int) -> list[Group]:
        """Groups for (global draw position, (label, task[, finished])) pairs, seeded by (step,
        position); a requeued group keeps its finished samples."""
        out = []
        for pos, (label, task, *kept) in positioned:
            group = Group(self.next_key, task, runs[label], SeedKey(step, pos), version)
            group.finished.update(kept[0] if kept else {})
            out.append(group)
            self.next_key += 1
        return out

    def rollout(
        self, *, sampler, tasks_per_step, runs, sync, policy, tokenizer, rollout_cfg,
        step, dist, progress=None, timer=None,
    ) -> StepRollouts:  # fmt: skip
        """One step's rollout phase on this rank (collective: counts and tasks are agreed)."""
        version = sync.updates
        share = len(range(dist.rank, tasks_per_step, dist.world_size))
        keep, stale = self.split_stale(version)
        need = max(0, self.in_flight_target(share) - len(keep))
        needs = all_gather_objects(need)
        drawn, requeued = self.draw(sampler, sum(needs))
        mine = [p for p, owner in enumerate(deal(needs)) if owner == dist.rank]
        fresh = self.start_groups([(p, drawn[p]) for p in mine], runs, step, version)
        restarted = sum(1 for p in mine if p < requeued)
        groups = keep + fresh
        ready = sorted((g for g in groups if g.complete), key=lambda g: g.first_version)
        policy.start_step(step)

        async def job():
            dropped = await discard_groups(stale)
            completed = await collect(
                groups,
                until=share - len(ready),
                version=version,
                policy=policy,
                tokenizer=tokenizer,
                max_concurrency=rollout_cfg.max_concurrency,
                progress=progress,
                drop_failed=True,
            )
            await discard_groups([g for g in groups if g.failed])
            return dropped, completed

        # conversations outlive the step (parked, their replies arriving) only with oversampling
        loop = self.background() if self.oversample > 1.0 else None
        self.carried = groups  # until the phase ends: what `close` closes if it is interrupted
        retried = retry_totals(groups)
        dropped, completed = sync.run(lambda: loop.run(job()) if loop else job(), timer)
        by_id = {g.group_id: g for g in groups}
        trained, failed = take_groups(ready + [by_id[i] for i in completed], groups, share)
        taken = {g.group_id for g in trained + failed}
        self.carried = [g for g in groups if g.group_id not in taken]
        trajectories, staleness = step_trajectories(trained, version)
        sizes = all_gather_objects([0 if g.failed else g.run.n for g in trained])
        counts = {
            "groups_started": float(len(fresh)),
            "groups_carried": float(len(self.carried)),
            "groups_resumed": float(
                sum(1 for g in trained if g.steps_in_flight > 1 and not g.failed)
            ),
            "conversations_parked": float(sum(len(g.parked) for g in self.carried)),
            "dropped_stale_samples": float(dropped),
            "restarted_groups": float(restarted),
        }
        now = retry_totals(groups)
        retries = {key: now[key] - retried[key] for key in now}
        retries["groups_dropped_failed"] = float(len(failed))
        return StepRollouts(trajectories, _by_global_position(sizes), staleness, counts, retries)


def retry_totals(groups: list[Group]) -> dict[str, float]:
    """The groups' retries and exhausted conversations so far (a step counts the difference)."""
    return {
        "retries": float(sum(g.retries for g in groups)),
        "retry_exhausted": float(sum(len(g.exhausted) for g in groups)),
    }


def take_groups(done: list[Group], groups: list[Group], share: int):
    """(the groups a step trains, the failed ones it drops): the first `share` complete groups
    (`done`: carried ones first, then in completion order) in the order drawn; when fewer
    completed, failed groups (`Group.failed`: a conversation still failed after its retries) fill
    the missing places with no trajectories (size 0), so positions stay dealt by rank. Every
    failed group is dropped, whether or not it holds a place."""
    failed = [g for g in groups if g.failed]
    trained = done[:share]
    trained += failed[: share - len(trained)]
    trained.sort(key=lambda g: (g.seed.step, g.seed.position))  # in the order drawn
    return trained, failed


def step_trajectories(trained: list[Group], version: int) -> tuple[list, list[int]]:
    """The trained groups' trajectories (a failed group has none), renumbered as the step's
    task positions, and each one's staleness at `version`."""
    trajectories, staleness = [], []
    for pos, group in enumerate(trained):
        if group.failed:
            continue
        for traj in group.trajectories():
            staleness.append(sample_staleness(version, traj.record.versions, traj.loss_mask))
            traj.group_id = f"{pos}:{group.task.task_id}"
            trajectories.append(traj)
    return trajectories, staleness


def deal(needs: list[int]) -> list[int]:
    """The rank that takes each drawn task: round-robin over the ranks that still need tasks.
    With every rank needing its share of a step, rank r takes positions r, r + W, ... (the
    strided dealing `mua.train.data.rank_slice` does), which `_by_global_position` undoes."""
    left, owners = list(needs), []
    while any(left):
        for rank, count in enumerate(left):
            if count:
                owners.append(rank)
                left[rank] -= 1
    return owners


def _by_global_position(sizes_per_rank: list[list[int]]) -> list[int]:
    """Interleave the ranks' group sizes: local position p on rank r is global p × W + r."""
    world = len(sizes_per_rank)
    total = sum(len(s) for s in sizes_per_rank)
    return [sizes_per_rank[t % world][t // world] for t in range(total)]


def staleness_metrics(staleness_per_rank: list[list[int]], counts_per_rank: list[dict]) -> dict:
    """`async/...` metrics of a step, over every rank's trained samples and counts."""
    values = sorted(s for part in staleness_per_rank for s in part)
    out: dict[str, float] = {}
    totals: Counter = Counter()
    for c in counts_per_rank:
        totals.update(c)
    for key, value in totals.items():
        out[f"async/{key}"] = float(value)
    if values:
        out["async/staleness_mean"] = sum(values) / len(values)
        out["async/staleness_max"] = float(values[-1])
        out["async/staleness_p50"] = float(values[(len(values) - 1) // 2])
        out["async/staleness_p90"] = float(values[math.ceil(0.9 * len(values)) - 1])
        for version_lag, count in sorted(Counter(values).items()):
            out[f"async/staleness_hist/{version_lag}"] = float(count)
    return out


RETRY_COUNTS = ("retries", "retry_exhausted", "groups_dropped_failed")


def retry_metrics(local: dict[str, float]) -> dict[str, float]:
    """`rollout/retries` (conversations sent back for another attempt), `rollout/retry_exhausted`
    (still failed after their last retry) and `rollout/groups_dropped_failed` (groups dropped for
    one of those) of a step, summed over ranks (collective)."""
    totals = all_reduce_sum([local.get(key, 0.0) for key in RETRY_COUNTS]).tolist()
    return {f"rollout/{key}": value for key, value in zip(RETRY_COUNTS, totals, strict=True)}


# ---- a run's checkpoints and end (called by `mua.train.trainer`) ---------------------------


def kept_finished(finished: dict, version: int) -> dict[str, dict]:
    """A group's finished trajectories as a checkpoint keeps them (see `in_flight_tasks`)."""
    return {
        str(k): replace(t, record=t.record.shifted(-version)).to_dict() for k, t in finished.items()
    }


def in_flight_checkpoint(parts) -> list[tuple[str, str, dict]]:
    """What a checkpoint records of the groups in flight (collective; [] without oversampling)."""
    return parts.carry.in_flight_tasks(parts.sync.updates)


def restore_in_flight(parts, recipe, saved: list, sampler) -> None:
    """Give a resumed run the tasks that were in flight at its checkpoint, to start first."""
    if not saved:
        return
    if recipe.rollout.oversample <= 1.0:
        log.warning(
            "the checkpoint has %d groups in flight; rollout.oversample is now 1, so their "
            "tasks are not trained",
            len(saved),
        )
        return
    parts.carry.requeue([restored(entry, sampler) for entry in saved])


def restored(entry, sampler) -> tuple[str, object, dict]:
    """A checkpoint's in-flight entry, (label, task id) or (label, task id, finished), as
    `requeue` takes it."""
    label, task_id = entry[0], entry[1]
    finished = entry[2] if len(entry) > 2 else {}
    trajs = {int(k): Trajectory.from_json(d) for k, d in finished.items()}
    return label, sampler.find_task(label, task_id), trajs


def close_in_flight(parts) -> int:
    """At the end of a run (or when it stops): close the parked conversations' envs; returns
    how many groups this rank still had in flight."""
    return parts.carry.close()
