"""The one door for running conversations: `collect(groups, until=None, ...)`.

Every verb describes its conversations as `Group`s (one per task, with its `SeedKey`) and hands
them here; at most `max_concurrency` run at once, with no barrier between turns. With `until=k`
a `PauseGate` parks the rest once k groups are complete (docs/async_rl.md). Retries
(`rollout.retries`) rerun a failed conversation in a fresh env; `gyms:` entries with a `program:`
run through the gateway (`mua.gateway.program.run_program`). An error that stops the run cancels
the others. Not here: the turn loop (`runner.run_one`), what a step trains, result rows.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from mua.config.rollout import RetryConfig
from mua.gym.api import GymContext, GymSpec, Task
from mua.rollout.runner import ParkedConversation, discard_parked, run_one
from mua.rollout.transcript import Trajectory

# Endings that are the environment's failure, not the policy's, and that a fresh env may not
# repeat: the ones `rollout.retries` runs again (a subset of `mua.algo.filters.FAILURE_REASONS`;
# `engine_error` and `drift` would recur with the same policy).
RETRIED_REASONS = frozenset({"user_failure", "env_error", "timeout"})


@dataclass(frozen=True)
class SeedKey:
    """What a conversation's sampling seeds derive from (with the policy's seed and the turn):
    the training `step` its group started in (None outside training), its group's `position`
    (the task's global position in that step's draw; in validation, in its gym's held-out list;
    in `mua eval`, the task id, so seeds do not depend on task order), its `sample` and, for a
    retried conversation, its `attempt`."""

    step: int | None
    position: int | str
    sample: int = 0
    attempt: int = 0  # 0: the first conversation; k: its k-th retry (`rollout.retries`)

    @property
    def retry_tag(self) -> str:
        """What a retried conversation's seeds add to the key's text: '' on the first attempt,
        so first attempts keep their seeds."""
        return f"/retry{self.attempt}" if self.attempt else ""


@dataclass
class Group:
    """One task's conversations (a GRPO group, or an evaluation's samples of one task), possibly
    spread over several `collect` calls. `run` (a `mua.gym.mix.GymRun`) says where they run:
    the gym, env context, limits, group size and, when set, the policy."""

    key: int  # names the group (`group_id`): unique among the groups collected together
    task: Task
    run: object  # GymRun
    seed: SeedKey  # its conversations' keys differ by `sample`
    first_version: int = 0  # the policy version when the group was started
    samples: tuple[int, ...] | None = None  # the samples to run (None: all of run.n)
    finished: dict[int, Trajectory] = field(default_factory=dict)  # sample index -> trajectory
    parked: dict[int, ParkedConversation] = field(default_factory=dict)
    steps_in_flight: int = 0  # collect calls it has been through
    attempts: dict[int, int] = field(default_factory=dict)  # sample -> its conversation's attempt
    retries: int = 0  # conversations sent back for another attempt, over the group's life
    exhausted: set[int] = field(default_factory=set)  # samples still failed after every retry

    @property
    def group_id(self) -> str:
        return f"{self.key}:{self.task.task_id}"

    @property
    def wanted(self) -> tuple[int, ...]:
        return tuple(range(self.run.n)) if self.samples is None else self.samples

    @property
    def complete(self) -> bool:
        return all(k in self.finished for k in self.wanted)

    @property
    def failed(self) -> bool:
        """A conversation still failed after its last retry and `rollout.retries.on_exhausted`
        is `drop_group`: training drops the group (`collect(drop_failed=True)`)."""
        return bool(self.exhausted) and retry_config(self.run).on_exhausted == "drop_group"

    def trajectories(self) -> list[Trajectory]:
        """The finished trajectories in sample order."""
        return [self.finished[k] for k in sorted(self.finished)]

    def oldest_version(self) -> int | None:
        """The oldest policy version that sampled a token of this group, finished or parked
        (None: nothing sampled)."""
        records = [t.record for t in self.finished.values()]
        records += [p.episode.builder.record for p in self.parked.values() if p.episode.builder]
        versions = [v for r in records for v, t in zip(r.versions, r.turn_index) if t >= 0]
        return min(versions) if versions else None


class PauseGate:
    """Closes once `target` groups are complete; conversations check it before each turn."""

    def __init__(self, target: int):
        self.target = target
        self.completed = 0
        self.closed = False
        self._closed = asyncio.Event()
        if target <= 0:
            self.close()

    def close(self) -> None:
        self.closed = True
        self._closed.set()

    async def wait_closed(self) -> None:
        await self._closed.wait()

    def group_complete(self) -> None:
        self.completed += 1
        if self.completed >= self.target:
            self.close()


def retry_config(run):
    """The retry settings a group's conversations run under (`rollout.retries`): its run's
    rollout section's; retries off when it has none."""
    return getattr(run.rollout_cfg, "retries", None) or RetryConfig()


def _retry(group: Group, k: int, traj: Trajectory, drop_failed: bool) -> bool:
    """True when sample k's finished conversation is to run again (a new attempt, counted in
    `group.retries`): it ended in `RETRIED_REASONS`, retries are on, its attempts are not spent
    and its group is not already dropped. A conversation whose attempts are spent is recorded in
    `group.exhausted`."""
    settings = retry_config(group.run)
    if settings.max == 0 or traj.termination not in RETRIED_REASONS:
        return False
    if drop_failed and group.failed:
        return False  # the group will not be trained: no more attempts for it
    attempt = group.attempts.get(k, 0)
    if attempt >= settings.max:
        group.exhausted.add(k)
        return False
    group.attempts[k] = attempt + 1
    group.retries += 1
    return True


async def _converse(group: Group, k: int, resume, *, policy, tokenizer, version: int, gate):
    """Run (or resume) sample k's conversation at its current attempt: a `Trajectory`, or a
    `ParkedConversation` when the gate closed."""
    run = group.run
    key = replace(group.seed, sample=k, attempt=group.attempts.get(k, 0))
    if run.driver is not None:  # a program gym: the gateway (`mua.run.driven`)
        return await run.driver(
            group.task, group.group_id, k, policy=run.policy or policy, run=run,
            tokenizer=tokenizer, seed_key=key, version=version,
        )  # fmt: skip
    if getattr(run.entry, "program", None) is not None:
        raise RuntimeError(f"gyms ({run.label}): a program entry's run needs mua.run.driven")
    return await run_one(
        group.task, group.group_id, k, policy=run.policy or policy, gym_spec=run.spec,
        gym_ctx=run.ctx, tokenizer=tokenizer, rollout_cfg=run.rollout_cfg, seed_key=key,
        version=version, gate=gate, resume=resume,
    )  # fmt: skip


async def collect(
    groups: list[Group],
    until: int | None = None,
    *,
    policy,
    tokenizer,
    max_concurrency: int,
    version: int = 0,
    progress=None,
    on_trajectory: Callable[[Group, Trajectory], None] | None = None,
    drop_failed: bool = False,
) -> list[str]:
    """Advance the groups' unfinished conversations (see the module docstring); returns the ids
    of the groups that completed in this call, in completion order. `progress.advance(traj)` and
    `on_trajectory(group, traj)` see each trajectory as it finishes (its `gym` set to the
    group's label; a retried conversation only once, its last attempt). With `drop_failed`
    (training) a `Group.failed` group starts or resumes no more conversations and never counts
    as completed."""
    pending = [g for g in groups if not g.complete]
    gate = PauseGate(until) if until is not None and until < len(pending) else None
    limit = asyncio.Semaphore(max_concurrency)
    completed: list[str] = []

    async def one(group: Group, k: int) -> None:
        async with limit:
            while True:
                if drop_failed and group.failed:
                    return  # its parked conversations are closed when the group is discarded
                resume = group.parked.pop(k, None)
                if resume is None and gate is not None and gate.closed:
                    return  # not started (a first attempt or a retry): nothing to park
                out = await _converse(
                    group, k, resume, policy=policy, tokenizer=tokenizer, version=version,
                    gate=gate,
                )  # fmt: skip
                if isinstance(out, ParkedConversation):
                    group.parked[k] = out
                    return
                if not _retry(group, k, out, drop_failed):
                    break
        out.gym, out.attempt = group.run.label, group.attempts.get(k, 0)
        group.finished[k] = out
        if progress is not None:
            progress.advance(out)
        if on_trajectory is not None:
            on_trajectory(group, out)
        if group.complete and not (drop_failed and group.failed):
            completed.append(group.group_id)
            if gate is not None:
                gate.group_complete()

    for group in groups:
        group.steps_in_flight += 1
    jobs = [
        asyncio.ensure_future(one(group, k))
        for group in pending
        for k in group.wanted
        if k not in group.finished
    ]
    try:
        await asyncio.gather(*jobs)
    except BaseException:
        # One failure that stops the run (RunFailure, a broken engine, an interrupt): the other
        # conversations would only keep the endpoints busy.
        for job in jobs:
            job.cancel()
        await asyncio.gather(*jobs, return_exceptions=True)
        raise
    return completed


async def discard_groups(groups: list[Group]) -> int:
    """Close the envs of the parked conversations of groups that will not be trained; returns
    how many conversations (finished, parked or unstarted) the groups held."""
    count = 0
    for group in groups:
        for parked in group.parked.values():
            await discard_parked(parked, group.run.rollout_cfg)
        group.parked.clear()
        count += group.run.n
    return count


async def run_rollouts(
    tasks: list[Task],
    *,
    n: int | None = None,
    policy,
    gym_spec: GymSpec | None = None,
    gym_ctx: GymContext | None = None,
    tokenizer,
    rollout_cfg,
    progress=None,
    runs: list | None = None,
) -> list[Trajectory]:
    """n trajectories per task, grouped by task (`group_id`), in task order then sample order,
    through `collect`. `runs[i]` (a `mua.gym.mix.GymRun`) says where task i
    runs (its gym, user, limits and n); without `runs`, `gym_spec`, `gym_ctx` and `n` serve
    every task. Seeds are keyed by task position."""
    from mua.gym.mix import GymRun

    if runs is None:
        runs = [GymRun("", gym_spec, gym_ctx, rollout_cfg, n or 1)] * len(tasks)
    if len(runs) != len(tasks):
        raise ValueError(f"{len(runs)} runs for {len(tasks)} tasks")
    groups = [
        Group(pos, task, run, SeedKey(None, pos))
        for pos, (task, run) in enumerate(zip(tasks, runs, strict=True))
    ]
    await collect(
        groups,
        policy=policy,
        tokenizer=tokenizer,
        max_concurrency=rollout_cfg.max_concurrency,
        progress=progress,
    )
    return [t for g in groups for t in g.trajectories()]


def run_rollouts_sync(tasks: list[Task], **kwargs) -> list[Trajectory]:
    """`run_rollouts` from synchronous code (starts and closes its own event loop)."""
    return asyncio.run(run_rollouts(tasks, **kwargs))
