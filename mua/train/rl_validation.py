"""In-training validation of the RL step: held-out tasks of every gym, rows as `mua eval` makes.

`validate(...)` runs this rank's slice of the held-out tasks, each gym's with its own env
context, limits and seed, all gyms' conversations in one `mua.rollout.collect.collect` (one
`rollout.max_concurrency` over all of them), gathers the result rows over ranks and
returns `val/...` over all rows, and with several gyms `val/<label>/...` and `val/macro/...`
(`per_gym_validation`). Not here: the training step (`mua.train.rl`).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from mua.distributed import all_gather_objects
from mua.rollout.policies import SeededPolicy
from mua.train.data import rank_slice

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
    """Held-out evaluation of every gym in one `collect`, gathered over all ranks.

    Each rank runs its slice of each gym's test tasks (at most `rollout.max_concurrency`
    conversations in flight over all gyms) and makes result rows as `mua eval` does; rows are
    gathered and summarised once, so the numbers do not depend on the number of ranks. Returns
    the summary's numbers under `val/`. Rank 0 also keeps `track.transcripts_per_step` of its
    trajectories (sample 0 of its first tasks, then sample 1, ...: the same tasks at every
    validation) as the run's `val` transcripts of this step.
    """
    from mua.eval.eval_runner import row_of
    from mua.eval.summary import flat_metrics, ordered, summarize
    from mua.rollout.collect import collect

    r = recipe
    step = parts.policy.step  # the training step just rolled out (`rollout` started the policy)
    keep = r.track.transcripts_per_step if dist.is_main else 0
    mine = deal_held_out(parts.test_by_gym, dist.rank, dist.world_size)
    groups = validation_groups(
        mine, parts.runs, r.eval.n, dist.rank, dist.world_size,
        lambda index: SeededPolicy.for_rollout(
            parts.sync.engine, r.rollout, r.model.tool_parser,
            seed=validation_seed(r.data.seed, index), temperature=r.eval.temperature,
        ),
    )  # fmt: skip
    finished = []  # rank 0's whole trajectories, for the transcripts
    rows: dict[str, list] = {label: [] for label in mine}

    def done(group, traj) -> None:
        run = group.run
        row = row_of(group.task, traj, run.spec.name, r.eval.success_threshold)
        rows[run.label].append({k: v for k, v in row.items() if k != "messages"})
        if keep:
            finished.append(traj)

    async def go():
        await collect(
            groups,
            policy=parts.policy,
            tokenizer=state.tokenizer,
            max_concurrency=r.rollout.max_concurrency,
            on_trajectory=done,
        )

    parts.sync.run(go, timer)
    ordered_rows = [
        (label, row)
        for label, gym_tasks in mine.items()
        for row in ordered(rows[label], [str(t.task_id) for t in gym_tasks])
    ]
    tasks = [t for gym_tasks in mine.values() for t in gym_tasks]
    position = {str(t.task_id): i for i, t in enumerate(tasks)}
    finished.sort(key=lambda t: (t.sample_index, position.get(str(t.task_id), len(position))))
    tracker.log_transcripts(step, finished[:keep], state.tokenizer, kind="val")
    every_row = [item for part in all_gather_objects(ordered_rows) for item in part]
    k_values = sorted({k for k in (1, r.eval.n, *r.eval.k) if 1 <= k <= r.eval.n})
    summary = summarize(
        [row for _, row in every_row], k_values, [str(t.task_id) for t in parts.test_tasks]
    )
    out = {
        key.replace("all/", "val/", 1): value
        for key, value in flat_metrics({"all": summary}).items()
    }
    if len(parts.runs) > 1:
        out.update(per_gym_validation(parts, every_row, k_values))
    return out


def validation_groups(mine, runs, n: int, rank: int, world_size: int, make_policy) -> list:
    """The groups of this rank's held-out tasks (`mine`: label -> tasks, `deal_held_out`), each
    gym with its own policy `make_policy(gym index)`.

    Each gym's held-out tasks are dealt to ranks on their own, and each gym samples with its own
    seed: task positions restart at 0 in every gym, so one seed would give the first task of
    every gym the same draws, and positions would depend on how the gyms interleave. Seeds are
    keyed as at step 0 every time (validations differ by the policy only), by the task's
    position in its gym's whole list, whatever the number of ranks."""
    from mua.eval.eval_runner import evaluation_groups

    groups = []
    for index, (label, tasks) in enumerate(mine.items()):
        run = replace(runs[label], policy=make_policy(index))
        for group in evaluation_groups(tasks, run, n, seed_step=0):
            group.seed = replace(group.seed, position=group.key * world_size + rank)
            groups.append(group)
    return groups


def deal_held_out(test_by_gym: dict[str, list], rank: int, world_size: int) -> dict[str, list]:
    """This rank's held-out tasks of each gym, dealt strided within the gym, so a task's local
    position maps back to its position in its gym's list (what `SeededPolicy` seeds by)."""
    return {label: rank_slice(tasks, rank, world_size) for label, tasks in test_by_gym.items()}


def validation_seed(data_seed: int, gym_index: int) -> int:
    """The sampling seed of the gym at `gym_index` in validation (the first gym's: data seed + 1)."""
    return data_seed + 1 + 7919 * gym_index


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
