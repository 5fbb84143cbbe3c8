"""The evaluation runner: `evaluate(tasks, policy=..., ...)`, used by `mua eval` and by training.

For one gym, n samples of every task through the rollout runner's `run_one` (at most
`rollout_cfg.max_concurrency` at once), each reduced to a result row as soon as it finishes
(appended to a `ResultStore` when given, so an interruption loses nothing finished). Samples
already in the store are skipped, which is how an evaluation resumes. Returns the rows of the
requested tasks (old and new) and their summary (`mua.eval.summary.summarize`). Each row
carries its task's content digest (`task_sha`), so a resume can tell a changed task.
`on_trajectory` sees each finished `Trajectory` whole (tokens included), before it becomes a row:
in-training validation keeps a few of them as transcripts.

`TrajectorySeededPolicy` seeds each request by (seed, task id, sample, turn), so sampled
evaluations (temperature > 0) give the same trajectories whatever the order, concurrency or
resume point. The caller builds the policy, the env context and the tokenizer; nothing here loads
models or prints.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections import Counter
from dataclasses import dataclass, field

from mua.eval.fingerprint import task_digest
from mua.eval.summary import ordered, result_row, summarize
from mua.rollout.policies import EnginePolicy

log = logging.getLogger("mua.eval")


class TrajectorySeededPolicy(EnginePolicy):
    """EnginePolicy with a per-(task, sample, turn) seed derived from the runner's route key."""

    def __init__(self, engine, *, seed: int = 0, **kwargs):
        super().__init__(engine, **kwargs)
        self.base_seed = seed
        self._turns: Counter = Counter()

    def request_seed(self, route_key: str) -> int:
        turn = self._turns[route_key]
        self._turns[route_key] += 1
        head, _, sample = route_key.rpartition("/")
        task_id = (
            head.split(":", 1)[1] if ":" in head else head
        )  # drop the runner's position prefix
        text = f"{self.base_seed}/{task_id}/{sample}/{turn}".encode()
        return int.from_bytes(hashlib.sha256(text).digest()[:8], "little") & (2**62 - 1)


@dataclass
class GymEvaluation:
    gym: str
    rows: list[dict] = field(default_factory=list)
    summary: dict = field(default_factory=dict)
    new_rows: int = 0


def trivial_baseline(gym_spec, tasks) -> float | None:
    """The gym's trivial-policy score on these tasks, when it defines one."""
    if gym_spec.trivial_baseline is None or not tasks:
        return None
    try:
        return float(gym_spec.trivial_baseline(tasks))
    except (
        Exception
    ) as err:  # a baseline is a reference number; its failure must not stop the evaluation
        log.warning("trivial baseline of gym %s failed: %s", gym_spec.name, err)
        return None


async def evaluate(
    tasks,
    *,
    policy,
    gym_spec,
    gym_ctx,
    tokenizer,
    rollout_cfg,
    n: int = 1,
    k_values=(1,),
    success_threshold: float = 1.0,
    store=None,
    progress=None,
    on_row=None,
    on_trajectory=None,
) -> GymEvaluation:
    """Evaluate `policy` on `tasks` of `gym_spec` (n samples each); see the module docstring."""
    from mua.rollout.runner import run_one

    gym = gym_spec.name
    limit = asyncio.Semaphore(rollout_cfg.max_concurrency)
    fresh: list[dict] = []

    async def one(position: int, task, sample: int) -> None:
        async with limit:
            traj = await run_one(
                task,
                f"{position}:{task.task_id}",
                sample,
                policy=policy,
                gym_spec=gym_spec,
                gym_ctx=gym_ctx,
                tokenizer=tokenizer,
                rollout_cfg=rollout_cfg,
            )
        if on_trajectory is not None:
            on_trajectory(traj)
        row = result_row(traj, gym, success_threshold)
        row["task_sha"] = task_digest(task)
        fresh.append(row)
        if store is not None:
            store.append(row)
        if progress is not None:
            progress.advance(traj)
        if on_row is not None:
            on_row(row)

    jobs = [
        one(pos, task, k)
        for pos, task in enumerate(tasks)
        for k in range(n)
        if store is None or not store.has((gym, str(task.task_id), k))
    ]
    await asyncio.gather(*jobs)
    wanted = {(str(t.task_id), k) for t in tasks for k in range(n)}
    known = store.rows_of(gym) if store is not None else fresh
    rows = [r for r in known if (str(r["task_id"]), int(r["sample_index"])) in wanted]
    order = [str(t.task_id) for t in tasks]
    k_all = sorted({k for k in (*k_values, 1, n) if 1 <= k <= n})
    summary = summarize(rows, k_all, order, trivial_baseline(gym_spec, tasks))
    return GymEvaluation(gym=gym, rows=ordered(rows, order), summary=summary, new_rows=len(fresh))


def evaluate_sync(tasks, **kwargs) -> GymEvaluation:
    """`evaluate` from synchronous code (its own event loop)."""
    return asyncio.run(evaluate(tasks, **kwargs))
