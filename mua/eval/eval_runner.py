"""The evaluation runner: `evaluate(tasks, policy=..., ...)`, used by `mua eval` and by training.

For one gym, n samples of every task through `collect`, each reduced to a result row as soon as it
finishes (appended to a `ResultStore` when given; samples already there are skipped, which is how
an evaluation resumes). `on_trajectory` sees each whole `Trajectory` first. Its policy is a
`mua.rollout.policies.SeededPolicy` keyed by task id, so sampled evaluations do not depend on order,
concurrency or resume point. Not here: building the policy, env context or tokenizer; printing.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from mua.eval.fingerprint import task_digest
from mua.eval.summary import ordered, result_row, summarize

log = logging.getLogger("mua.eval")


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


def evaluation_groups(tasks, run, n: int, seed_step=None, skip=None) -> list:
    """One `Group` per task, its n samples less those `skip((task, sample))` says are done;
    seeded by task id (`seed_step` None) or by (step, task position) in training."""
    from mua.rollout.collect import Group, SeedKey

    groups = []
    for pos, task in enumerate(tasks):
        samples = tuple(k for k in range(n) if skip is None or not skip(task, k))
        seed = SeedKey(None, str(task.task_id)) if seed_step is None else SeedKey(seed_step, pos)
        if samples:
            groups.append(Group(pos, task, run, seed, samples=samples))
    return groups


def row_of(task, traj, gym: str, success_threshold: float) -> dict:
    """The result row of a finished trajectory, with its task's content digest."""
    row = result_row(traj, gym, success_threshold)
    row["task_sha"] = task_digest(task)
    return row


async def evaluate(
    tasks,
    *,
    policy,
    tokenizer,
    run=None,
    gym_spec=None,
    gym_ctx=None,
    rollout_cfg=None,
    n: int = 1,
    k_values=(1,),
    success_threshold: float = 1.0,
    store=None,
    progress=None,
    on_row=None,
    on_trajectory=None,
    entry=None,
    label: str | None = None,
) -> GymEvaluation:
    """Evaluate `policy` on `tasks` (n samples each); see the module docstring. They run by
    `run` (a ready `GymRun`, `mua.run`), else by `gym_spec`, `gym_ctx`, `rollout_cfg` and
    `entry` (the recipe's `gyms:` entry: a program gym's `program`, the seat). Rows and store
    keys carry `label` (default: the gym's name) as their gym."""
    from mua.gym.mix import GymRun
    from mua.rollout.collect import collect
    from mua.run import driven

    if run is None:
        run = driven(GymRun(gym_spec.name, gym_spec, gym_ctx, rollout_cfg, n, entry=entry))
    gym = label or run.spec.name
    fresh: list[dict] = []
    done = None if store is None else (lambda task, k: store.has((gym, str(task.task_id), k)))

    def finished(group, traj) -> None:
        if on_trajectory is not None:
            on_trajectory(traj)
        row = row_of(group.task, traj, gym, success_threshold)
        fresh.append(row)
        if store is not None:
            store.append(row)
        if on_row is not None:
            on_row(row)

    await collect(
        evaluation_groups(tasks, run, n, skip=done),
        policy=policy,
        tokenizer=tokenizer,
        max_concurrency=run.rollout_cfg.max_concurrency,
        progress=progress,
        on_trajectory=finished,
    )
    wanted = {(str(t.task_id), k) for t in tasks for k in range(n)}
    known = store.rows_of(gym) if store is not None else fresh
    rows = [r for r in known if (str(r["task_id"]), int(r["sample_index"])) in wanted]
    order = [str(t.task_id) for t in tasks]
    k_all = sorted({k for k in (*k_values, 1, n) if 1 <= k <= n})
    summary = summarize(rows, k_all, order, trivial_baseline(run.spec, tasks))
    return GymEvaluation(gym=gym, rows=ordered(rows, order), summary=summary, new_rows=len(fresh))
