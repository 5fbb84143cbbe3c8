"""Prep machinery behind `mua prep`: build a gym's tasks and write split files.

`build_and_write` calls a gym's `build_tasks(source, seed, options)`, checks every task
(`TaskRowCheck`) and writes `<out>/<split>.parquet` (`mua.gym.taskfile`) under the folder's lock;
`check_options` validates prep options against the gym's defaults.
Not here: any particular gym, printing, mixing gyms (`mua.gym.mix`).
"""

from __future__ import annotations

import difflib
from pathlib import Path

from mua.errors import UsageError
from mua.gym.api import Task
from mua.gym.taskfile import TaskRowCheck, write_tasks
from mua.output_folders import FolderLock


def parse_option_args(items: list[str]) -> dict:
    """`["k=v", ...]` -> dict, values read as YAML scalars (`3` -> 3, `true` -> True)."""
    import yaml

    from mua.config.recipe_yaml import load_text  # recipe YAML's limits (aliases, depth)

    out = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--option {item!r}: expected key=value (e.g. --option num_train=100)")
        try:
            out[key.strip()] = load_text(value) if value != "" else ""
        except yaml.YAMLError:
            out[key.strip()] = value
    return out


def check_options(options: dict, defaults: dict, gym: str) -> dict:
    """`defaults` updated with `options`; unknown keys and wrong types are UsageErrors."""
    merged = dict(defaults)
    for key, value in (options or {}).items():
        if key not in defaults:
            close = difflib.get_close_matches(key, list(defaults), n=1)
            hint = (
                f"; did you mean {close[0]!r}?"
                if close
                else f"; known options: {', '.join(sorted(defaults))}"
            )
            raise UsageError(f"{gym}: unknown prep option {key!r}{hint}")
        want = type(defaults[key])
        if want is int and (isinstance(value, bool) or not isinstance(value, int)):
            raise UsageError(f"{gym}: prep option {key} must be an integer, got {value!r}")
        if want is int and value < 0:
            raise UsageError(f"{gym}: prep option {key} must be >= 0, got {value}")
        if want is float and (isinstance(value, bool) or not isinstance(value, (int, float))):
            raise UsageError(f"{gym}: prep option {key} must be a number, got {value!r}")
        merged[key] = float(value) if want is float else value
    return merged


def _check_splits(name: str, splits, source: str | None) -> dict[str, list[Task]]:
    """Every task usable and every id unique; bad data from `source` is one line naming the row."""
    if not isinstance(splits, dict) or not splits:
        raise RuntimeError(
            f"gym {name!r}: build_tasks returned {type(splits).__name__}, expected dict[split, list[Task]]"
        )
    origin = source or f"{name}'s built-in tasks"
    for split, tasks in splits.items():
        check = TaskRowCheck(origin, f"{split} task")
        for i, t in enumerate(tasks):
            if not isinstance(t, Task) or t.gym != name or t.split != split:
                raise RuntimeError(
                    f"gym {name!r}: build_tasks put a bad task in split {split!r}: {t!r:.200}"
                )
            check.check(i, t)
    return splits


def build_and_write(
    gym: str,
    out_dir: str | Path,
    source: str | None = None,
    seed: int = 0,
    options: dict | None = None,
) -> dict[str, tuple[Path, int]]:
    """Build `gym`'s tasks and write one parquet per split; returns {split: (path, rows)}."""
    from mua.gym.registry import get_gym

    spec = get_gym(gym)
    if source is not None and not Path(source).exists():
        raise UsageError(
            f"--source {source}: no such file or folder; give the path of {gym}'s public data"
        )
    splits = _check_splits(spec.name, spec.build_tasks(source, seed, dict(options or {})), source)
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out}: exists and is not a folder")
    written = {}
    with FolderLock(out, what="prep output folder", verb="mua prep", remove_on_release=True):
        for split in sorted(splits):
            path = write_tasks(splits[split], out / f"{split}.parquet")
            written[split] = (path, len(splits[split]))
    return written
