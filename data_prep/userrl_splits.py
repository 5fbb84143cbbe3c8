"""UserRL's published train/test splits, read from its `<gym>_multiturn/{train,test}.parquet`.

`published_splits(source, gym)` finds the gym's parquet folder at or under `source` and returns
{key: split}, the key being what joins a parquet row to the gym's JSON record (`id` for
function, intention and persuade, `title` for telepathy and turtle), or None when `source`
holds no such folder (a JSON file alone: the gym then splits by hash). `read_persuasion(source)`
returns the persuasion claims with their split, since their only public copy is those parquets.
Bad files raise `UsageError` with one line. Nothing here builds prompts: each gym's `data.py` does.
"""

from __future__ import annotations

from pathlib import Path

from mua.errors import UsageError

FOLDERS = {
    "function": "function_multiturn",
    "telepathy": "telepathy_multiturn",
    "turtle": "turtle_multiturn",
    "intention": "intention_multiturn",
    "persuade": "persuasion_multiturn",
}
KEYS = {
    "function": "id",
    "telepathy": "title",
    "turtle": "title",
    "intention": "id",
    "persuade": "id",
}
SPLITS = ("train", "test")


def find_split_folder(source: str | Path, gym: str) -> Path | None:
    """The folder holding `gym`'s published parquets at or under `source`, else None."""
    path = Path(source).expanduser()
    name = FOLDERS[gym]
    if path.is_file():
        return path.parent if path.parent.name == name else None
    if not path.is_dir():
        return None
    if path.name == name:
        return path
    found = sorted(p for p in path.rglob(name) if p.is_dir())
    return found[0] if found else None


def _reward_models(folder: Path, split: str) -> list[dict]:
    import pyarrow.parquet as pq

    file = folder / f"{split}.parquet"
    if not file.is_file():
        raise UsageError(f"{folder}: {split}.parquet is missing; UserRL publishes train and test")
    try:
        column = pq.read_table(file, columns=["reward_model"]).column("reward_model").to_pylist()
    except Exception as e:  # pyarrow raises several types for a broken or foreign file
        raise UsageError(f"{file}: not a UserRL task parquet ({type(e).__name__}: {e})") from None
    for i, row in enumerate(column):
        if not isinstance(row, dict):
            raise UsageError(f"{file}: row {i} has no reward_model record")
    return column


def published_splits(source: str | Path, gym: str) -> dict[str, str] | None:
    """{join key: "train"|"test"} from UserRL's parquets, or None when there are none."""
    folder = find_split_folder(source, gym)
    if folder is None:
        return None
    key = KEYS[gym]
    out: dict[str, str] = {}
    for split in SPLITS:
        for i, row in enumerate(_reward_models(folder, split)):
            value = row.get(key)
            if not isinstance(value, str) or not value:
                raise UsageError(f"{folder}/{split}.parquet: row {i} has no reward_model.{key}")
            if value in out:
                raise UsageError(f"{folder}: {key} {value!r} appears twice in the splits")
            out[value] = split
    return out


def apply_published(
    rows: list[dict], splits: dict[str, str], key: str, where: str
) -> list[tuple[dict, str]]:
    """(row, split) for every row the published splits name; every named row must exist."""
    by_key = {str(r[key]): r for r in rows}
    missing = [k for k in splits if k not in by_key]
    if missing:
        raise UsageError(
            f"{where}: {len(missing)} task(s) of the published splits are not in the data "
            f"(first: {missing[0]!r}); pass the UserRL folder whose data and parquets belong together"
        )
    return [(by_key[k], s) for k, s in splits.items()]


def read_persuasion(source: str | Path) -> list[tuple[dict, str]]:
    """[({id, claim, argument}, split)] from `persuasion_multiturn/{train,test}.parquet`."""
    folder = find_split_folder(source, "persuade")
    if folder is None:
        raise UsageError(
            f"{source}: no persuasion_multiturn folder found; pass the UserRL data folder "
            "(its persuasion_multiturn/train.parquet and test.parquet hold the claims)"
        )
    out = []
    for split in SPLITS:
        for i, row in enumerate(_reward_models(folder, split)):
            fields = {k: row.get(k) for k in ("id", "claim", "argument")}
            bad = [k for k, v in fields.items() if not isinstance(v, str) or not v.strip()]
            if bad:
                raise UsageError(f"{folder}/{split}.parquet: row {i} lacks reward_model.{bad[0]}")
            out.append((fields, split))
    return out
