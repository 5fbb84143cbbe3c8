"""Partial rollouts: groups in flight across steps, and the gate that pauses them.

A step of asynchronous RL (docs/async_rl.md) keeps more GRPO groups in flight than it trains on.
`advance_groups` runs every unfinished conversation of its groups (fresh ones from the env's
reset, parked ones from the turn they stopped at) until `target` groups are complete; the
`PauseGate` then closes and every other conversation parks: one waiting on its env (a user's
reply) at once, with the reply's task still running (`ParkedConversation.pending`), one inside
a generation once that turn is sampled, the others before their next policy turn. What was
sampled, the trajectories already finished and the parked conversations stay in their
`GroupInFlight`, which the next step hands back to `advance_groups`. The caller keeps the event
loop they ran on alive between steps (`mua.rollout.background_loop`), so pending replies arrive
meanwhile.

Every assistant turn is recorded with the policy version (weight pushes so far) that sampled it
(`GroupInFlight.turn_versions`): a turn is never split across versions, because parking happens
before or after a policy turn, never inside one. Nothing here trains, drops stale groups or talks to other ranks
(`mua.train.partial_rollouts` does).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from mua.gym.api import Task
from mua.rollout.runner import ParkedConversation, Route, discard_parked, run_one
from mua.rollout.transcript import Trajectory


@dataclass
class GroupInFlight:
    """One task's group of `route.n` conversations, possibly spread over several steps."""

    key: int  # unique on this rank for the whole run
    task: Task
    route: Route
    first_version: int  # the policy version when the group was started
    finished: dict[int, Trajectory] = field(default_factory=dict)  # sample index -> trajectory
    parked: dict[int, ParkedConversation] = field(default_factory=dict)
    turn_versions: dict[int, list[int]] = field(default_factory=dict)  # sample -> per turn
    steps_in_flight: int = 0  # rollout phases it has been through

    @property
    def group_id(self) -> str:
        return f"{self.key}:{self.task.task_id}"

    @property
    def complete(self) -> bool:
        return len(self.finished) == self.route.n

    def trajectories(self) -> list[Trajectory]:
        """The finished trajectories in sample order."""
        return [self.finished[k] for k in sorted(self.finished)]

    def oldest_version(self) -> int | None:
        """The oldest policy version that sampled a turn of this group (None: nothing sampled)."""
        versions = [v for turns in self.turn_versions.values() for v in turns]
        return min(versions) if versions else None


class PauseGate:
    """Closes once `target` groups are complete; conversations check it before each turn."""

    def __init__(self, groups: list[GroupInFlight], target: int, version: int):
        self.version = version
        self.target = target
        self._groups = {g.group_id: g for g in groups}
        self.completed: list[str] = []  # group ids in the order they completed
        self.closed = False
        self._closed = asyncio.Event()
        if target <= 0:
            self.close()

    def close(self) -> None:
        self.closed = True
        self._closed.set()

    async def wait_closed(self) -> None:
        await self._closed.wait()

    def turn_sampled(self, group_id: str, sample_index: int) -> None:
        group = self._groups[group_id]
        group.turn_versions.setdefault(sample_index, []).append(self.version)

    def finished(self, group_id: str, sample_index: int, traj: Trajectory) -> None:
        group = self._groups[group_id]
        group.finished[sample_index] = traj
        if group.complete:
            self.completed.append(group_id)
            if len(self.completed) >= self.target:
                self.close()


async def advance_groups(
    groups: list[GroupInFlight],
    *,
    target: int,
    version: int,
    policy,
    tokenizer,
    max_concurrency: int,
    progress=None,
) -> list[str]:
    """Run the groups' unfinished conversations until `target` groups are complete, then let
    the others park; returns the ids of the groups that completed here, in completion order.

    A conversation that had not started when the gate closed stays unstarted (it starts from the
    env's reset when its group is advanced again). An error that stops the run (a broken engine,
    a `MuaError`) cancels the others and propagates, as in `run_rollouts`."""
    gate = PauseGate(groups, target, version)
    limit = asyncio.Semaphore(max_concurrency)

    async def one(group: GroupInFlight, k: int) -> None:
        async with limit:
            resume = group.parked.pop(k, None)
            if resume is None and gate.closed:
                return  # not started: nothing to park
            route = group.route
            out = await run_one(
                group.task,
                group.group_id,
                k,
                policy=route.policy or policy,
                gym_spec=route.gym_spec,
                gym_ctx=route.gym_ctx,
                tokenizer=tokenizer,
                rollout_cfg=route.rollout_cfg,
                gate=gate,
                resume=resume,
            )
        if isinstance(out, ParkedConversation):
            group.parked[k] = out
            return
        out.gym = route.label
        if progress is not None:
            progress.advance(out)
        gate.finished(group.group_id, k, out)

    for group in groups:
        group.steps_in_flight += 1
    jobs = [
        asyncio.ensure_future(one(group, k))
        for group in groups
        for k in range(group.route.n)
        if k not in group.finished
    ]
    try:
        await asyncio.gather(*jobs)
    except BaseException:
        for job in jobs:
            job.cancel()
        await asyncio.gather(*jobs, return_exceptions=True)
        raise
    return list(gate.completed)


async def discard_groups(groups: list[GroupInFlight]) -> int:
    """Close the envs of the parked conversations of groups that will not be trained; returns
    how many conversations (finished, parked or unstarted) the groups held."""
    count = 0
    for group in groups:
        for parked in group.parked.values():
            await discard_parked(parked, group.route.rollout_cfg)
        group.parked.clear()
        count += group.route.n
    return count
