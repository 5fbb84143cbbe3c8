"""Prep machinery behind `mua prep`: build a gym's tasks, write split files, mix gyms by weight.

`build_and_write` asks the registry for a gym, calls its `build_tasks(source, seed, options)` and
writes `<out>/<split>.parquet` in the canonical schema (see `mua.gym.taskfile`); every task is
checked first (`TaskRowCheck`: usable, unique ids per split), so bad source data fails here,
naming it. `mix_task_dirs` combines several such folders into one by weight, deterministically.
Both hold the output folder's lock (`mua.run_dir.FolderLock`) while they write.
`check_options` validates a gym's prep options against its defaults. Nothing here knows any particular gym, and nothing
prints: the CLI renders the returned counts.

Mix weights are relative shares of rows: weights 3 and 1 give a split whose rows are 75% from the
first folder and 25% from the second. Without an explicit size, a split is the largest mix in
which no folder's row is repeated; with `rows` larger than that, rows repeat (suffix `~rN`).
"""

from __future__ import annotations

import difflib
import random
from dataclasses import dataclass
from pathlib import Path

from mua.errors import UsageError
from mua.gym.api import Task
from mua.gym.taskfile import TaskRowCheck, read_tasks, write_tasks
from mua.run_dir import FolderLock


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
    with FolderLock(out, what="prep output folder", verb="mua prep"):
        for split in sorted(splits):
            path = write_tasks(splits[split], out / f"{split}.parquet")
            written[split] = (path, len(splits[split]))
    return written


@dataclass
class MixSource:
    folder: Path
    weight: float


def parse_mix_sources(items: list[str]) -> list[MixSource]:
    """`["data/travel:3", "data/math:1"]` -> sources; each folder must hold split parquet files."""
    if not items:
        raise UsageError(
            "prep mix: give at least one FOLDER:WEIGHT (e.g. data/travel:3 data/math:1)"
        )
    sources = []
    for item in items:
        folder, sep, weight_text = item.rpartition(":")
        if not sep or not folder:
            raise UsageError(f"prep mix: {item!r}: expected FOLDER:WEIGHT (e.g. data/travel:3)")
        try:
            weight = float(weight_text)
        except ValueError:
            raise UsageError(
                f"prep mix: {item!r}: weight {weight_text!r} is not a number"
            ) from None
        if not weight > 0:
            raise UsageError(f"prep mix: {item!r}: weight must be > 0")
        path = Path(folder)
        if not path.is_dir() or not any(path.glob("*.parquet")):
            raise UsageError(
                f"prep mix: {folder}: no task files (*.parquet) there; create them with `mua prep --gym NAME --out {folder}`"
            )
        sources.append(MixSource(path, weight))
    return sources


def _allocate(total: int, shares: list[float]) -> list[int]:
    """Integers summing to `total`, proportional to `shares` (largest remainder)."""
    raw = [total * s for s in shares]
    counts = [int(r) for r in raw]
    order = sorted(range(len(raw)), key=lambda i: (-round(raw[i] - counts[i], 9), -shares[i], i))
    for i in order[: total - sum(counts)]:
        counts[i] += 1
    return counts


def _draw(tasks: list[Task], count: int, rng: random.Random) -> list[Task]:
    if count <= len(tasks):
        return rng.sample(tasks, count)
    drawn = []
    for repeat in range(count // len(tasks) + 1):
        batch = tasks if len(drawn) + len(tasks) <= count else rng.sample(tasks, count - len(drawn))
        for t in batch:
            tid = t.task_id if repeat == 0 else f"{t.task_id}~r{repeat}"
            drawn.append(Task(tid, t.gym, t.split, t.prompt, t.payload, t.source, t.version))
    return drawn


def _unique_ids(tasks: list[Task]) -> list[Task]:
    seen: set[str] = set()
    out = []
    for t in tasks:
        tid = t.task_id if t.task_id not in seen else f"{t.gym}/{t.task_id}"
        n = 1
        while tid in seen:
            n += 1
            tid = f"{t.gym}/{t.task_id}#{n}"
        seen.add(tid)
        out.append(
            t
            if tid == t.task_id
            else Task(tid, t.gym, t.split, t.prompt, t.payload, t.source, t.version)
        )
    return out


def mix_task_dirs(
    sources: list[MixSource], out_dir: str | Path, seed: int = 0, rows: int | None = None
) -> dict[str, dict[str, int]]:
    """Write `<out>/<split>.parquet` mixing every split found; returns {split: {folder: rows}}."""
    splits = sorted({p.stem for s in sources for p in s.folder.glob("*.parquet")})
    with FolderLock(out_dir, what="prep output folder", verb="mua prep"):
        report = _mix_splits(sources, splits, out_dir, seed, rows)
    if not report:
        raise UsageError("prep mix: the given folders hold no task rows")
    return report


def _mix_splits(sources: list[MixSource], splits: list[str], out_dir, seed: int, rows) -> dict:
    report = {}
    for split in splits:
        present = [
            (i, s, read_tasks(s.folder / f"{split}.parquet"))
            for i, s in enumerate(sources)
            if (s.folder / f"{split}.parquet").exists()
        ]
        present = [(i, s, t) for i, s, t in present if t]
        if not present:
            continue
        weight_sum = sum(s.weight for _, s, _ in present)
        shares = [s.weight / weight_sum for _, s, _ in present]
        total = (
            rows
            if rows is not None
            else int(min(len(t) / sh for (_, _, t), sh in zip(present, shares, strict=True)) + 1e-9)
        )
        counts = _allocate(total, shares)
        mixed = []
        for (i, _source, tasks), count in zip(present, counts, strict=True):
            mixed.extend(_draw(tasks, count, random.Random(f"{seed}:{split}:{i}")))
        random.Random(f"{seed}:{split}:mix").shuffle(mixed)
        write_tasks(_unique_ids(mixed), Path(out_dir) / f"{split}.parquet")
        report[split] = {str(s.folder): c for (_, s, _), c in zip(present, counts, strict=True)}
    return report
