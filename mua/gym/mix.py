"""A recipe's gyms at run time: each entry's tasks, user, limits and scoring, and their checks.

`check_gyms(recipe, verb)` refuses, before anything launches and in one line naming the entry,
unknown gyms, task files naming gyms not listed, unknown reward weights and overrides the verb
does not use. `entry_tasks(recipe, split)` gives each entry's tasks (its files, else the rows of
the top-level files naming its gym, else the built-in split); `gym_runs(recipe)` each entry's
`GymRun` (gym, env context with its own user, budgets, group size). `seat: user` entries are
checked by `mua.gym.user_seat.check_seat`. Not here: readying runs (`mua.run`), rollouts, training.
"""

from __future__ import annotations

from dataclasses import dataclass

from mua.errors import UsageError

TRAIN_ONLY = ("weight", "n", "score", "credit", "gamma", "standardize_rewards", "curriculum")
HELD_OUT_SPLITS = ("test", "validation", "dev")


@dataclass
class GymRun:
    """One entry of `gyms:` ready to run: what each of its conversations gets (the one run-time
    type of an entry; `mua.rollout.collect` runs conversations by it)."""

    label: str
    spec: object  # GymSpec
    ctx: object  # GymContext, with the entry's user
    rollout_cfg: object  # RolloutConfig with the entry's and the gym's budgets
    n: int
    entry: object = None  # the GymConfig
    user_cfg: object = None
    policy: object = None  # when set, replaces the caller's policy for these conversations
    # how each conversation runs: None is the turn loop (`mua.rollout.runner.run_one`); a program
    # entry's is the gateway's `run_program` (set by `mua.run.driven`, with the same arguments)
    driver: object = None
    seated: bool = False  # the user seat's spec is applied (`mua.users.seat_spec.seated`)


def _where(i: int, entry) -> str:
    return f"gyms[{i}] ({entry.key})"


def entry_user(user_cfg, entry):
    """The top-level user with the entry's `user:` keys applied (its kind first)."""
    from mua.config.users import LLMUserConfig, ScriptedUserConfig

    over = entry.user
    if over is None:
        return user_cfg
    kind = over.kind or user_cfg.kind
    if kind == "scripted":
        return ScriptedUserConfig()
    base = user_cfg.model_dump() if user_cfg.kind == "llm" else {}
    given = {k: v for k, v in over.model_dump().items() if v is not None and k != "kind"}
    base = over_address(base, given)
    base["kind"] = "llm"
    return LLMUserConfig(**base)


def over_address(base: dict, given: dict) -> dict:
    """Endpoint keys `base` with the override `given` applied: naming a `checkpoint` replaces
    the base's `base_url` and model, naming a `base_url` replaces its `checkpoint`."""
    drop = set()
    if "checkpoint" in given:
        drop = {"base_url", "model"}
    elif "base_url" in given:
        drop = {"checkpoint"}
    return {**{k: v for k, v in base.items() if k not in drop}, **given}


def entry_rollout(rollout_cfg, entry, spec):
    """The rollout section one entry's conversations run with: the entry's budgets and
    temperature where it sets them, then the gym's default budgets where neither does."""
    from mua.gym.budgets import with_gym_budgets

    keys = ("max_turns", "max_new_tokens_per_turn", "max_total_tokens", "temperature")
    update = {k: getattr(entry, k) for k in keys if getattr(entry, k) is not None}
    cfg = rollout_cfg
    if update:
        cfg = rollout_cfg.model_copy(update=update)
        cfg = type(rollout_cfg).model_construct(
            _fields_set=rollout_cfg.model_fields_set | set(update), **dict(cfg)
        )
    cfg = with_gym_budgets(cfg, spec)
    if cfg.max_total_tokens < cfg.max_new_tokens_per_turn:
        raise UsageError(
            f"gyms ({entry.key}): max_total_tokens {cfg.max_total_tokens} is below "
            f"max_new_tokens_per_turn {cfg.max_new_tokens_per_turn}; raise it or lower the per-turn budget"
        )
    return cfg


def gym_run(recipe, entry, *, with_client: bool = True) -> GymRun:
    """The GymRun of one entry of `recipe.gyms` (its LLM user client made only when `with_client`)."""
    from mua.gym import GymContext, get_gym
    from mua.llm.llm_client import make_llm_client

    spec = get_gym(entry.name)
    rollout_cfg = entry_rollout(recipe.rollout, entry, spec)
    user = entry_user(recipe.user, entry)
    ctx = GymContext(
        options=dict(entry.options),
        reward_weights=dict(entry.reward_weights),
        user_kind=user.kind,
        llm=make_llm_client(user) if with_client else None,
        seed=recipe.data.seed,
    )
    return GymRun(
        label=entry.key,
        spec=spec,
        ctx=ctx,
        rollout_cfg=rollout_cfg,
        n=entry.n or recipe.rollout.n,
        entry=entry,
        user_cfg=user,
    )


def gym_runs(recipe, *, with_clients: bool = True) -> list[GymRun]:
    """Every entry's GymRun (LLM user clients are made only when `with_clients`)."""
    return [gym_run(recipe, entry, with_client=with_clients) for entry in recipe.gyms]


def _rows_by_gym(paths: list[str]) -> dict[str, list]:
    from mua.gym.taskfile import read_tasks

    out: dict[str, list] = {}
    for path in paths:
        for task in read_tasks(path):
            out.setdefault(task.gym, []).append(task)
    return out


def _builtin(entry, seed: int, split: str) -> list:
    from mua.gym import get_gym

    splits = get_gym(entry.name).build_tasks(None, seed=seed, options=dict(entry.options))
    names = (split,) if split == "train" else HELD_OUT_SPLITS
    for name in names:
        if splits.get(name):
            return list(splits[name])
    raise UsageError(
        f"gyms ({entry.key}): gym {entry.name!r} has no built-in {split} split (has "
        f"{sorted(splits)}); give the entry's {split}_files"
    )


def entry_tasks(recipe, split: str, *, builtin: bool = True) -> dict[str, list]:
    """{label: tasks} for `split` ("train" or "test"), in the order of `gyms:`.

    An entry's own files, else the rows of data.<split>_files naming its gym, else (only when no
    entry and no top-level file gives tasks of this split, and `builtin`) the built-in split."""
    by_file = entry_task_files(recipe, split, builtin=builtin)
    return {label: [t for f in files for t in f] for label, files in by_file.items()}


def entry_task_files(recipe, split: str, *, builtin: bool = True) -> dict[str, list[list]]:
    """As `entry_tasks`, each entry's tasks kept per file (what `data.weights` weighs); the
    built-in split counts as one file."""
    from mua.gym.taskfile import read_tasks

    top = recipe.data.train_files if split == "train" else recipe.data.test_files
    field_name = f"{split}_files"
    shared = [_rows_by_gym([path]) for path in top]
    any_files = bool(top) or any(getattr(e, field_name) for e in recipe.gyms)
    out: dict[str, list[list]] = {}
    for entry in recipe.gyms:
        own = getattr(entry, field_name)
        if own:
            out[entry.key] = [read_tasks(p) for p in own]
        elif any(entry.name in rows for rows in shared):
            out[entry.key] = [rows.get(entry.name, []) for rows in shared]
        elif not any_files and builtin:
            out[entry.key] = [_builtin(entry, recipe.data.seed, split)]
        else:
            out[entry.key] = []
    return out


def check_gyms(recipe, verb: str) -> None:
    """Refuse a gym list that cannot run (see the module docstring); one line, exit 2."""
    from mua.gym.registry import list_gyms

    names = list_gyms()
    for i, entry in enumerate(recipe.gyms):
        if entry.name == "all" and verb == "eval":
            continue
        if entry.name not in names:
            from mua.gym.registry import get_gym

            where = "gym.name" if len(recipe.gyms) == 1 else _where(i, entry)
            try:
                get_gym(entry.name)
            except UsageError as e:  # its did-you-mean
                raise UsageError(f"{where}: {e}") from None
        if entry.name != "all":
            from mua.gym.registry import get_gym
            from mua.gym.user_seat import check_seat

            where = "gym" if len(recipe.gyms) == 1 else _where(i, entry)
            check_seat(where, entry, get_gym(entry.name))
        _check_reward_weights(i, entry)
        _check_overrides(i, entry, recipe, verb)
        _check_program(i, entry, recipe, verb)
    _check_file_routing(recipe, verb)
    if verb == "train" and len(recipe.gyms) > 1 and recipe.data.weights is not None:
        raise UsageError(
            "data.weights weighs the files of one gym; with several gyms give each entry a "
            "`weight` instead"
        )
    if verb == "train" and recipe.algo.kind != "sft" and len(recipe.gyms) > 1:
        _check_every_entry_has_tasks(recipe)
    if verb == "train":
        from pathlib import Path

        for i, entry in enumerate(recipe.gyms):
            for path in [*entry.train_files, *entry.test_files]:
                if not Path(path).exists():
                    raise UsageError(
                        f"{_where(i, entry)}: task file {path} not found; create it with `mua prep`"
                    )


def _check_every_entry_has_tasks(recipe) -> None:
    from pathlib import Path

    files = [*recipe.data.train_files, *(p for e in recipe.gyms for p in e.train_files)]
    if not all(Path(p).exists() for p in files):
        return  # the launcher names the missing file
    by_gym = entry_tasks(recipe, "train", builtin=False)
    for i, entry in enumerate(recipe.gyms):
        if not by_gym.get(entry.key):
            raise UsageError(
                f"{_where(i, entry)}: no training tasks; give the entry train_files, or rows of "
                f"gym {entry.name} in data.train_files"
            )


def _check_program(i: int, entry, recipe, verb: str) -> None:
    """A program gym (`program:`) must be runnable: its command or entry point found, its gym
    able to score conversations when asked to, and GRPO (its split sessions share one reward)."""
    import shutil
    from pathlib import Path

    from mua.gym import get_gym

    program = entry.program
    if program is None:
        return
    where = _where(i, entry)
    if verb == "train" and recipe.algo.kind == "ppo":
        raise UsageError(
            f"{where}: program gyms train with GRPO (algo.kind: grpo), not ppo; change algo.kind "
            "or remove the entry's program"
        )
    if program.reward == "gym" and get_gym(entry.name).score_conversation is None:
        raise UsageError(
            f"{where}: program.reward is gym, but gym {entry.name} cannot score a conversation; "
            'use program.reward: stdout (the program prints {"reward": x})'
        )
    if program.command is not None:
        exe = program.command[0]
        if exe != "python" and shutil.which(exe) is None and not Path(exe).is_file():
            raise UsageError(
                f"{where}: program.command {exe!r} not found; give a path or a command on PATH"
            )
    else:
        from mua.plugin_targets import missing_module

        if (why := missing_module(program.entry_point)) is not None:
            raise UsageError(f"{where}: {why}")


def _check_reward_weights(i: int, entry) -> None:
    from mua.gym import get_gym

    known = get_gym(entry.name).reward_components
    unknown = sorted(set(entry.reward_weights) - set(known)) if known else []
    if unknown:
        raise UsageError(
            f"{_where(i, entry)}: reward_weights names {unknown[0]!r}, which gym {entry.name} "
            f"does not have; its components are {', '.join(sorted(known))}"
        )


def _check_overrides(i: int, entry, recipe, verb: str) -> None:
    allowed = {"weight"} | ({"n"} if verb == "rollout" else set())
    set_keys = [k for k in TRAIN_ONLY if k in entry.model_fields_set and k not in allowed]
    if verb != "train" and set_keys:
        raise UsageError(
            f"{_where(i, entry)}: {set_keys[0]} is a training setting, which `mua {verb}` does "
            "not use; remove it from the entry"
        )
    if verb == "eval" and entry.temperature is not None:
        raise UsageError(
            f"{_where(i, entry)}: `mua eval` samples every gym at eval.temperature; remove the "
            "entry's temperature (or evaluate that gym alone with --temperature)"
        )
    if verb != "train":
        return
    if entry.temperature is not None and entry.temperature != recipe.rollout.temperature:
        raise UsageError(
            f"{_where(i, entry)}: temperature {entry.temperature:g} differs from "
            f"rollout.temperature {recipe.rollout.temperature:g}; training scores log-probs at one "
            "sampling temperature, so set rollout.temperature instead"
        )
    algo = recipe.algo
    if algo.kind != "grpo":
        grpo_keys = [k for k in ("score", "credit", "standardize_rewards") if getattr(entry, k)]
        grpo_keys += ["curriculum"] if entry.curriculum is not None else []
        grpo_keys += ["gamma"] if entry.gamma is not None else []
        if grpo_keys:
            raise UsageError(
                f"{_where(i, entry)}: {grpo_keys[0]} applies to GRPO, not algo.kind={algo.kind}; "
                "remove it from the entry"
            )


def _check_file_routing(recipe, verb: str) -> None:
    """Every row of the top-level files goes to exactly one entry."""
    from mua.gym.taskfile import read_tasks

    if verb == "train" and recipe.algo.kind == "sft":
        return
    listed: dict[str, list] = {}
    for entry in recipe.gyms:
        listed.setdefault(entry.name, []).append(entry)
    if "all" in listed or (verb == "eval" and len(recipe.gyms) == 1):
        return  # `mua eval --gym NAME` picks its gym's rows out of files shared by several
    tops = [*recipe.data.train_files, *recipe.data.test_files]
    if verb == "rollout":
        tops = list(recipe.data.train_files)
    for path in tops:
        for task in read_tasks(path):
            entries = listed.get(task.gym)
            if not entries:
                fix = (
                    f"set gym.name={task.gym} to match the files, or list both in gyms"
                    if len(recipe.gyms) == 1
                    else f"add an entry `{{name: {task.gym}}}` or give each entry its own files"
                )
                raise UsageError(
                    f"{path} holds tasks of gym {task.gym!r}, which gyms does not list "
                    f"({', '.join(e.key for e in recipe.gyms)}); {fix}"
                )
            field_name = "train_files" if path in recipe.data.train_files else "test_files"
            sharing = [e for e in entries if not getattr(e, field_name)]
            if not sharing:
                raise UsageError(
                    f"{path} holds tasks of gym {task.gym!r}, but its gyms entry "
                    f"({entries[0].key}) has its own {field_name}, so they would not be used; "
                    f"move the file to that entry's {field_name}"
                )
            if len(sharing) > 1:
                raise UsageError(
                    f"{path}: rows of gym {task.gym!r} would go to both "
                    f"{sharing[0].key} and {sharing[1].key}; give each of these entries its own "
                    f"{field_name}"
                )
    for i, entry in enumerate(recipe.gyms):
        for path in [*entry.train_files, *entry.test_files]:
            for task in read_tasks(path):
                if task.gym != entry.name:
                    raise UsageError(
                        f"{_where(i, entry)}: {path} holds tasks of gym {task.gym!r}, not "
                        f"{entry.name!r}; list that file under its own gym's entry"
                    )
                break


def default_weights(sizes: dict[str, int], entries) -> dict[str, float]:
    """Each entry's weight: its own, else its number of training rows (as if concatenated)."""
    return {
        e.key: float(e.weight) if e.weight is not None else float(sizes.get(e.key, 0))
        for e in entries
    }


def with_entry_budgets(recipe) -> list:
    """The entries with every budget filled in (theirs, else the recipe's, else the gym's), so
    the resolved recipe records what each gym's conversations really had."""
    from mua.gym import get_gym

    out = []
    for entry in recipe.gyms:
        cfg = entry_rollout(recipe.rollout, entry, get_gym(entry.name))
        keys = ("max_turns", "max_new_tokens_per_turn", "max_total_tokens")
        out.append(entry.model_copy(update={k: getattr(cfg, k) for k in keys}))
    return out
