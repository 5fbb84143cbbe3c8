"""Held-out tasks per gym for `mua eval`: from `data.test_files`, else each gym's built-in test split.

Files may mix gyms (`--gym all` is every gym in them); without files each gym builds its split with
`data.seed`, as `mua prep` does. Each gym gets its `gyms` entry's options and own `test_files`;
results are keyed by the entry's label; `eval.max_tasks` keeps the first N per gym. A task id
that appears twice is refused (results are keyed by it).
"""

from __future__ import annotations

from mua.errors import UsageError

HELD_OUT_SPLITS = ("test", "validation", "dev")


def gym_names(requested: list[str], from_files: list[str] | None, recipe=None) -> list[str]:
    """The entries to evaluate, by label (an entry's label, else its gym's name)."""
    from mua.gym.registry import get_gym, list_gyms

    names: list[str] = []
    for item in requested:
        names.extend(p.strip() for p in item.split(",") if p.strip())
    if not names:
        raise UsageError("no gym to evaluate; pass --gym NAME (or --gym all)")
    if "all" in names:  # without files: every gym with a built-in dataset
        if from_files:
            return sorted(set(from_files))
        return [n for n in list_gyms() if not get_gym(n).needs_data]
    for name in names:
        gym = recipe.gym_section(name).name if recipe is not None else name
        get_gym(gym)  # UsageError with a did-you-mean for an unknown name
    return list(dict.fromkeys(names))


def _builtin_split(spec, recipe, label: str | None = None) -> list:
    options = dict(recipe.gym_section(label or spec.name).options)
    splits = spec.build_tasks(None, seed=recipe.data.seed, options=options)
    for split in HELD_OUT_SPLITS:
        if splits.get(split):
            return list(splits[split])
    raise UsageError(
        f"gym {spec.name!r} has no held-out split (has {sorted(splits)}); give data.test_files"
    )


def load_eval_tasks(recipe, requested: list[str]) -> dict[str, list]:
    """{gym name: tasks}, in the order the gyms were asked for."""
    from mua.gym.registry import get_gym

    by_gym: dict[str, list] = {}
    if recipe.data.test_files:
        from mua.gym.taskfile import read_tasks

        first_file: dict[tuple[str, str], str] = {}
        for path in recipe.data.test_files:
            for row, task in enumerate(read_tasks(path)):  # read_tasks: unique ids per file
                key = (task.gym, str(task.task_id))
                if key in first_file:  # results are keyed by id: the second would be skipped
                    raise UsageError(
                        f"{path}: row {row}: task_id {task.task_id!r} is also in "
                        f"{first_file[key]}; held-out task ids must be unique across data.test_files"
                    )
                first_file[key] = str(path)
                by_gym.setdefault(task.gym, []).append(task)
    names = gym_names(requested, list(by_gym) if recipe.data.test_files else None, recipe)
    limit = recipe.eval.max_tasks
    out = {}
    for label in names:
        section = recipe.gym_section(label)
        name = section.name
        if section.test_files:  # the entry's own held-out files
            from mua.gym.taskfile import read_tasks

            tasks = [t for path in section.test_files for t in read_tasks(path)]
        elif recipe.data.test_files:
            if name not in by_gym:
                raise UsageError(
                    f"data.test_files hold no tasks of gym {name!r} (they have {sorted(by_gym)})"
                )
            tasks = by_gym[name]
        else:
            tasks = _builtin_split(get_gym(name), recipe, label)
        out[label] = tasks[:limit] if limit else tasks
    return out
