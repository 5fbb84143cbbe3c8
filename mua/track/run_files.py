"""What a training run keeps in its run dir for people to read back: `metrics.jsonl`,
`transcripts/step_NNNNNN.jsonl` and `transcripts/val_NNNNNN.jsonl`.

Rank 0 writes them beside MLflow so `mua view RUN` needs only the folder. A transcript line is a
`Trajectory` as JSON plus `step`, `gym` and decoded `token_runs` (trained tokens marked), so
reading needs no tokenizer. A resume drops rows after its checkpoint (`keep_metrics_through`); a
step logged twice anyway reads back as its last record.
Not here: deciding what to sample, computing metrics.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

METRICS_FILE = "metrics.jsonl"
TRANSCRIPTS_DIR = "transcripts"
# What a transcript file holds, its name's prefix: a training step's rollouts, or a validation's
TRANSCRIPT_KINDS = ("step", "val")


def append_metrics(run_dir: str | Path, step: int, metrics: dict) -> None:
    clean = {
        k: float(v)
        for k, v in metrics.items()
        if isinstance(v, (int, float)) and math.isfinite(float(v))
    }
    with open(Path(run_dir) / METRICS_FILE, "a", encoding="utf-8") as f:
        f.write(json.dumps({"step": int(step), **clean}) + "\n")


def keep_metrics_through(run_dir: str | Path, step: int) -> None:
    """Drop the rows of steps after `step` (and torn lines), rewriting the file atomically; a
    file with nothing to drop is left untouched."""
    path = Path(run_dir) / METRICS_FILE
    if not path.exists():
        return
    lines = path.read_text(encoding="utf-8").splitlines()
    kept = [line for line in lines if _row_step(line) is not None and _row_step(line) <= step]
    if len(kept) == len(lines):
        return
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_text("".join(f"{line}\n" for line in kept), encoding="utf-8")
    os.replace(tmp, path)


def _row_step(line: str) -> int | None:
    try:
        return int(json.loads(line)["step"])
    except (ValueError, KeyError, TypeError):
        return None


def read_metrics(run_dir: str | Path) -> list[dict]:
    """Per-step metric dicts in step order (a torn last line is skipped)."""
    path = Path(run_dir) / METRICS_FILE
    by_step: dict[int, dict] = {}
    if path.exists():
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                row = json.loads(line)
                by_step[int(row["step"])] = row
            except (ValueError, KeyError, TypeError):
                continue
    return [by_step[s] for s in sorted(by_step)]


def transcript_record(traj, step: int, gym: str, tokenizer=None) -> dict:
    record = {"step": int(step), **traj.to_dict()}
    record["gym"] = getattr(traj, "gym", "") or gym  # the entry it ran in, in a several-gym run
    if tokenizer is not None:
        from mua.rollout.render import token_runs

        record["token_runs"] = token_runs(traj, tokenizer)
    return record


def transcripts_name(step: int, kind: str = "step") -> str:
    """`step_NNNNNN` (a training step's rollouts) or `val_NNNNNN` (the validation after it)."""
    if kind not in TRANSCRIPT_KINDS:
        raise ValueError(f"transcript kind {kind!r}: use one of {', '.join(TRANSCRIPT_KINDS)}")
    return f"{kind}_{int(step):06d}"


def write_transcripts(
    run_dir: str | Path, step: int, trajectories, gym: str, tokenizer=None, kind: str = "step"
) -> Path:
    """`transcripts/<kind>_NNNNNN.jsonl`, written whole under a temporary name, then renamed."""
    folder = Path(run_dir) / TRANSCRIPTS_DIR
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{transcripts_name(step, kind)}.jsonl"
    tmp = folder / f".{path.name}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        for traj in trajectories:
            record = transcript_record(traj, step, gym, tokenizer)
            f.write(json.dumps(record, ensure_ascii=False, default=str) + "\n")
    os.replace(tmp, path)
    return path


def read_transcripts(run_dir: str | Path, kind: str = "step") -> list[dict]:
    """Every step's transcript records of one kind (`step` or `val`), in step order."""
    transcripts_name(0, kind)  # a kind that is not one is an error, not an empty list
    records = []
    for path in sorted((Path(run_dir) / TRANSCRIPTS_DIR).glob(f"{kind}_*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                records.append(json.loads(line))
            except ValueError:
                continue
    return records
