"""`mua rollout` over a recipe's `gyms:` list: every entry's tasks, each conversation with its own
gym's user, limits, group size and sampling temperature, all in one `collect`.

`mixed_rollouts(recipe, make_engine_policy)` returns the trajectories (each with its entry's label
in `gym`), in entry order. Tasks come from each entry's `train_files`, else the rows of
`data.train_files` naming its gym, else the gym's built-in `split`; `data.max_tasks` applies per
entry. Does not write anything; `mua.cli.rollout_cmd` does.
"""

from __future__ import annotations

from mua.errors import UsageError


def entry_rollout_tasks(recipe) -> dict[str, list]:
    """label -> tasks to roll out (see the module docstring)."""
    from mua.gym.mix import entry_tasks

    by_gym = entry_tasks(recipe, "train", builtin=False)
    limit = recipe.data.max_tasks
    for entry in recipe.gyms:
        if not by_gym.get(entry.key):
            from mua.gym import get_gym

            splits = get_gym(entry.name).build_tasks(
                None, seed=recipe.data.seed, options=dict(entry.options)
            )
            if recipe.split not in splits:
                raise UsageError(
                    f"gyms ({entry.key}): gym {entry.name!r} has no split {recipe.split!r}; "
                    f"choose one of {sorted(splits)}"
                )
            by_gym[entry.key] = list(splits[recipe.split])
        if limit:
            by_gym[entry.key] = by_gym[entry.key][:limit]
    return by_gym


async def mixed_rollouts(recipe, runs, tasks_by_gym, make_policy, tokenizer, progress) -> list:
    """Every entry's tasks (`tasks_by_gym`, by label) through one `collect`, each group with its
    entry's run and the policy `make_policy(run)`; trajectories in entry, task, sample order."""
    from dataclasses import replace

    from mua.rollout.collect import Group, SeedKey, collect

    by_label = {run.label: replace(run, policy=make_policy(run)) for run in runs}
    groups = []
    for label, gym_tasks in tasks_by_gym.items():
        for task in gym_tasks:
            pos = len(groups)
            groups.append(Group(pos, task, by_label[label], SeedKey(None, pos)))
    await collect(
        groups,
        policy=None,
        tokenizer=tokenizer,
        max_concurrency=recipe.rollout.max_concurrency,
        progress=progress,
    )
    return [t for g in groups for t in g.trajectories()]
