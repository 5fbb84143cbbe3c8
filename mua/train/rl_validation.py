"""In-training validation of the RL step: held-out tasks of every gym through `mua eval`'s runner.

`validate(...)` evaluates this rank's slice of the held-out tasks, each gym's with its own env
context and limits (the gyms' conversations run together), gathers the rows over ranks and
returns `val/...` over all rows, and with several gyms `val/<label>/...` and `val/macro/...`
(`per_gym_validation`). Not here: the training step (`mua.train.rl`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mua.distributed import all_gather_objects
from mua.train.data import rank_slice
from mua.train.rl_setup import SeededPolicy

if TYPE_CHECKING:
    from mua.config.recipes import TrainRecipe
    from mua.distributed import DistInfo
    from mua.track.tracker import Tracker
    from mua.train.rl_setup import PolicyState, RLParts
    from mua.train.step_timer import StepTimer


def validate(
    *,
    recipe: TrainRecipe,
    dist: DistInfo,
    parts: RLParts,
    state: PolicyState,
    tracker: Tracker,
    timer: StepTimer | None = None,
) -> dict[str, float]:
    """Held-out evaluation through the shared evaluation runner, gathered over all ranks.

    Each rank evaluates its slice of the test tasks with `mua.eval.eval_runner.evaluate` (the code
    `mua eval` runs); rows are gathered and summarised once, so the numbers do not depend on the
    number of ranks. Returns the summary's numbers under `val/`. Rank 0 also keeps
    `track.transcripts_per_step` of its trajectories (sample 0 of its first tasks, then sample 1,
    ...: the same tasks at every validation) as the run's `val` transcripts of this step.
    """
    from mua.eval.eval_runner import evaluate
    from mua.eval.summary import flat_metrics, summarize

    r = recipe
    step = parts.policy.step  # the training step just rolled out (`rollout` started the policy)
    keep = r.track.transcripts_per_step if dist.is_main else 0
    finished = []  # rank 0's whole trajectories, for the transcripts
    # Each gym's held-out tasks are dealt to ranks on their own, and each gym samples with its
    # own seed: task positions restart at 0 in every gym, so one seed would give the first task
    # of every gym the same draws, and positions would depend on how the gyms interleave.
    mine = deal_held_out(parts.test_by_gym, dist.rank, dist.world_size)
    policies = {
        label: SeededPolicy(
            parts.engine,
            r.rollout,
            r.model.tool_parser,
            seed=validation_seed(r.data.seed, index),
            rank=dist.rank,
            world_size=dist.world_size,
            temperature=r.eval.temperature,
        )
        for index, label in enumerate(parts.test_by_gym)
    }

    async def go():
        import asyncio

        jobs, job_labels = [], []
        for label, run in parts.runs.items():
            gym_tasks = mine.get(label, [])
            if not gym_tasks:
                continue
            job_labels.append(label)
            jobs.append(
                evaluate(
                    gym_tasks,
                    policy=policies[label],
                    gym_spec=run.spec,
                    gym_ctx=run.ctx,
                    tokenizer=state.tokenizer,
                    rollout_cfg=run.rollout_cfg,
                    n=r.eval.n,
                    k_values=r.eval.k,
                    success_threshold=r.eval.success_threshold,
                    on_trajectory=_keep_labelled(finished, label) if keep else None,
                )
            )
        results = await asyncio.gather(*jobs)  # the gyms' conversations run together
        return [
            (label, row)
            for label, result in zip(job_labels, results, strict=True)
            for row in result.rows
        ]

    rows = [
        (label, {k: v for k, v in row.items() if k != "messages"})
        for label, row in parts.sync.run(go, timer)
    ]
    tasks = [t for gym_tasks in mine.values() for t in gym_tasks]
    position = {str(t.task_id): i for i, t in enumerate(tasks)}
    finished.sort(key=lambda t: (t.sample_index, position.get(str(t.task_id), len(position))))
    tracker.log_transcripts(step, finished[:keep], state.tokenizer, kind="val")
    every_row = [item for part in all_gather_objects(rows) for item in part]
    k_values = sorted({k for k in (1, r.eval.n, *r.eval.k) if 1 <= k <= r.eval.n})
    summary = summarize(
        [row for _, row in every_row], k_values, [str(t.task_id) for t in parts.test_tasks]
    )
    out = {
        key.replace("all/", "val/", 1): value
        for key, value in flat_metrics({"all": summary}).items()
    }
    if parts.multi_gym:
        out.update(per_gym_validation(parts, every_row, k_values))
    return out


def deal_held_out(test_by_gym: dict[str, list], rank: int, world_size: int) -> dict[str, list]:
    """This rank's held-out tasks of each gym, dealt strided within the gym, so a task's local
    position maps back to its position in its gym's list (what `SeededPolicy` seeds by)."""
    return {label: rank_slice(tasks, rank, world_size) for label, tasks in test_by_gym.items()}


def validation_seed(data_seed: int, gym_index: int) -> int:
    """The sampling seed of the gym at `gym_index` in validation (the first gym's: data seed + 1)."""
    return data_seed + 1 + 7919 * gym_index


def _keep_labelled(finished: list, label: str):
    """An `on_trajectory` that keeps a validation trajectory with its gym's label."""

    def keep(trajectory) -> None:
        trajectory.gym = label
        finished.append(trajectory)

    return keep


def per_gym_validation(parts, every_row, k_values) -> dict[str, float]:
    """`val/<label>/...` for each gym, and `val/macro/reward_mean` / `success_rate`: the unweighted
    mean over gyms of each gym's own mean (every gym counts the same, whatever its task count)."""
    from mua.eval.summary import flat_metrics, summarize

    summaries = {}
    for label, tasks in parts.test_by_gym.items():
        rows = [row for lab, row in every_row if lab == label]
        if rows:
            summaries[label] = summarize(rows, k_values, [str(t.task_id) for t in tasks])
    out = {f"val/{key}": value for key, value in flat_metrics(summaries).items()}
    for key in ("reward_mean", "success_rate"):
        values = [s[key] for s in summaries.values() if s.get(key) is not None]
        if values:
            out[f"val/macro/{key}"] = sum(values) / len(values)
    return out
