"""The rollout phase of an asynchronous RL step: oversampled groups, carried over, bounded staleness.

With `rollout.oversample` > 1 (docs/async_rl.md) each rank keeps ceil(oversample × its share of
`data.tasks_per_step`) groups in flight. `PartialRollouts.rollout` then, on every rank:

1. drops carried groups that would be older than `algo.max_staleness` when trained (their
   conversations are closed, their samples counted in `async/dropped_stale_samples`);
2. starts fresh groups to fill the rank up (the counts are agreed over ranks, the tasks drawn
   once from the sampler, as in the synchronous step, and dealt in contiguous blocks);
3. advances every group (`mua.rollout.carryover.advance_groups`) until the rank has its share
   of complete groups: complete groups carried from earlier steps first (oldest first), then
   the ones completing now, in completion order;
4. hands those groups' trajectories to the step, renumbered as the step's task positions (so
   `global_index`, mini-batches and seeds work as in the synchronous step), and keeps the rest
   (unfinished, or complete beyond the share) for the next step.

A group is trained once, in the step that takes it; nothing is trained twice and nothing is
dropped without being counted. A version is the number of weight pushes before a turn was
sampled (`EngineSync.updates`); within one step the version does not change, so the staleness
checked in (1) is the staleness at training. Groups carried at the end of a run, or across a
resume from a checkpoint, are not trained (a resumed run starts with none).
Not here: the conversations themselves (`mua.rollout.carryover`), the loss correction
(`mua.algo.offpolicy`).
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field

from mua.algo import sample_staleness
from mua.distributed import all_gather_objects
from mua.rollout.carryover import GroupInFlight, advance_groups, discard_groups


@dataclass
class StepRollouts:
    """What the asynchronous rollout phase hands the step on this rank."""

    trajectories: list  # the trained groups' trajectories, group by group, samples in order
    group_sizes: list[int]  # size of every trained group of the step, by global task position
    staleness: list[int]  # per trajectory
    counts: dict[str, float]  # local counts: started, carried, dropped, resumed


@dataclass
class PartialRollouts:
    """This rank's groups carried between steps."""

    oversample: float
    max_staleness: int
    carried: list[GroupInFlight] = field(default_factory=list)
    next_key: int = 0

    def in_flight_target(self, share: int) -> int:
        return math.ceil(self.oversample * share - 1e-9)

    def split_stale(self, version: int) -> tuple[list[GroupInFlight], list[GroupInFlight]]:
        """(groups still within the bound when trained at `version`, groups past it)."""
        keep, stale = [], []
        for group in self.carried:
            oldest = group.oldest_version()
            too_old = oldest is not None and version - oldest > self.max_staleness
            (stale if too_old else keep).append(group)
        return keep, stale

    def start_groups(self, labelled_tasks, route_of, version: int) -> list[GroupInFlight]:
        out = []
        for label, task in labelled_tasks:
            out.append(GroupInFlight(self.next_key, task, route_of(label), version))
            self.next_key += 1
        return out

    def rollout(
        self, *, sampler, tasks_per_step, route_of, sync, policy, tokenizer, rollout_cfg,
        step, dist, progress=None, timer=None,
    ) -> StepRollouts:  # fmt: skip
        """One step's rollout phase on this rank (collective: counts and tasks are agreed)."""
        version = sync.updates
        share = len(range(dist.rank, tasks_per_step, dist.world_size))
        keep, stale = self.split_stale(version)
        need = max(0, self.in_flight_target(share) - len(keep))
        needs = all_gather_objects(need)
        drawn = sampler.next_labelled(sum(needs)) if sum(needs) else []
        offset = sum(needs[: dist.rank])
        fresh = self.start_groups(drawn[offset : offset + need], route_of, version)
        groups = keep + fresh
        ready = sorted((g for g in keep if g.complete), key=lambda g: g.first_version)
        policy.start_step(step)

        async def job():
            dropped = await discard_groups(stale)
            completed = await advance_groups(
                groups,
                target=share - len(ready),
                version=version,
                policy=policy,
                tokenizer=tokenizer,
                max_concurrency=rollout_cfg.max_concurrency,
                progress=progress,
            )
            return dropped, completed

        dropped, completed = sync.run(job, timer)
        by_id = {g.group_id: g for g in groups}
        trained = (ready + [by_id[i] for i in completed])[:share]
        taken = {g.group_id for g in trained}
        self.carried = [g for g in groups if g.group_id not in taken]
        trajectories, staleness = [], []
        for pos, group in enumerate(trained):
            for k, traj in enumerate(group.trajectories()):
                staleness.append(
                    sample_staleness(
                        version,
                        _token_versions(traj, group.turn_versions.get(k, [])),
                        traj.loss_mask,
                    )
                )
                traj.group_id = f"{pos}:{group.task.task_id}"
                trajectories.append(traj)
        sizes = all_gather_objects([g.route.n for g in trained])
        counts = {
            "groups_started": float(len(fresh)),
            "groups_carried": float(len(self.carried)),
            "groups_resumed": float(sum(1 for g in trained if g.steps_in_flight > 1)),
            "conversations_parked": float(sum(len(g.parked) for g in self.carried)),
            "dropped_stale_samples": float(dropped),
        }
        return StepRollouts(trajectories, _by_global_position(sizes), staleness, counts)


def _token_versions(traj, turn_versions: list[int]) -> list[int]:
    """Per token, the version that sampled it (its assistant turn's); -1 off the policy's turns."""
    return [turn_versions[t] if 0 <= t < len(turn_versions) else -1 for t in traj.turn_index]


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
