"""What `mua view` reads: training runs and evaluations found under the folders it is given.

A training run is a folder with `recipe.resolved.yaml` (transcripts `transcripts/step_N.jsonl`
and `val_N.jsonl`, curves `metrics.jsonl`); an evaluation one with `results.jsonl`, plus
`user_audit.json` when audited. Each step, validation (`<run>:val@N`) and evaluation becomes a
checkpoint of the page and each transcript a flat record (gym, task, sample, reward, termination);
folders are searched two levels deep. Several gyms and program gyms add their charts.
Not here: writing or rendering.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from mua.errors import UsageError
from mua.track.run_files import TRANSCRIPT_KINDS, read_metrics, read_transcripts

CURVES = ("reward/mean", "reward/success_rate", "val/reward_mean", "val/success_rate")
# program gyms (`mua.gateway`): sessions split by a program that did not continue its history,
# and tool calls the gateway could not read (sums over each step's trajectories)
GATEWAY_CURVES = ("gateway/splits", "gateway/malformed_calls")


@dataclass
class Checkpoint:
    key: str  # unique on the page
    label: str
    source: str  # the run or evaluation folder's name
    step: int | None = None  # training steps only


@dataclass
class ViewData:
    checkpoints: list[Checkpoint] = field(default_factory=list)
    records: list[dict] = field(default_factory=list)
    curves: dict[str, dict[str, list[tuple[int, float]]]] = field(default_factory=dict)
    runs: list[str] = field(default_factory=list)
    audits: dict[str, dict] = field(default_factory=dict)  # evaluation -> user_audit.json


def _is_run(folder: Path) -> bool:
    return (folder / "recipe.resolved.yaml").is_file() and (
        (folder / "transcripts").is_dir() or (folder / "metrics.jsonl").is_file()
    )


def _is_eval(folder: Path) -> bool:
    return (folder / "results.jsonl").is_file()


def find_sources(paths: list[str | Path], depth: int = 2) -> list[Path]:
    """Training runs and evaluations at or under `paths` (at most `depth` levels down)."""
    found: list[Path] = []
    for given in paths:
        root = Path(given)
        if not root.is_dir():
            raise UsageError(f"{given}: no such folder; give a run dir (or a folder of runs)")
        level = [root]
        for _ in range(depth + 1):
            nxt = []
            for folder in level:
                if _is_run(folder) or _is_eval(folder):
                    found.append(folder)
                else:
                    nxt.extend(sorted(p for p in folder.iterdir() if p.is_dir()))
            level = nxt
    if not found:
        raise UsageError(
            f"no training run or evaluation under {', '.join(map(str, paths))}: a run dir has "
            "recipe.resolved.yaml and transcripts/ (written while training), an evaluation results.jsonl"
        )
    return list(dict.fromkeys(found))


def _record(raw: dict, checkpoint: Checkpoint, index: int) -> dict:
    turn_rewards = raw.get("turn_rewards") or []
    return {
        "id": f"{checkpoint.key}#{index}",
        "checkpoint": checkpoint.key,
        "gym": str(raw.get("gym", "")),
        "task_id": str(raw.get("task_id", "")),
        "sample_index": int(raw.get("sample_index", 0)),
        "reward": float(raw.get("reward", 0.0)),
        "turn_rewards": [float(r) for r in turn_rewards],
        "termination": str(raw.get("termination", "")),
        "detail": str(raw.get("detail") or ""),
        "num_turns": int(raw.get("num_turns", 0)),
        "messages": list(raw.get("messages") or []),
        "token_runs": raw.get("token_runs"),
        "splits": int((raw.get("metrics") or {}).get("gateway/splits", 0)),
    }


def _label(folder: Path, roots: list[Path]) -> str:
    for root in roots:
        try:
            rel = folder.resolve().relative_to(root.resolve())
        except ValueError:
            continue
        return str(rel) if str(rel) != "." else folder.name
    return folder.name


def _run_checkpoint(name: str, step: int, kind: str) -> Checkpoint:
    if kind == "val":
        return Checkpoint(
            key=f"{name}:val@{step}",
            label=f"{name} · val@{step} (held-out, after step {step})",
            source=name,
            step=step,
        )
    return Checkpoint(key=f"{name}@{step}", label=f"{name} · step {step}", source=name, step=step)


def _read_run(folder: Path, name: str, data: ViewData) -> None:
    groups: dict[tuple[int, str], list[dict]] = {}
    for kind in TRANSCRIPT_KINDS:
        for raw in read_transcripts(folder, kind):
            groups.setdefault((int(raw.get("step", 0)), kind), []).append(raw)
    for step, kind in sorted(groups, key=lambda g: (g[0], TRANSCRIPT_KINDS.index(g[1]))):
        ckpt = _run_checkpoint(name, step, kind)
        data.checkpoints.append(ckpt)
        data.records += [_record(raw, ckpt, i) for i, raw in enumerate(groups[step, kind])]
    metrics = read_metrics(folder)
    series = {key: [(int(m["step"]), float(m[key])) for m in metrics if key in m] for key in CURVES}
    series = {k: v for k, v in series.items() if v}
    if series:
        data.curves[name] = series
    gateway = {
        k: [(int(m["step"]), float(m[k])) for m in metrics if k in m] for k in GATEWAY_CURVES
    }
    gateway = {k: v for k, v in gateway.items() if v}
    if gateway:
        data.curves[f"{name} · gateway"] = gateway
    per_gym = per_gym_series(metrics)
    if per_gym:
        data.curves[f"{name} · per gym"] = per_gym
    data.runs.append(name)


def per_gym_series(metrics: list[dict]) -> dict[str, list[tuple[int, float]]]:
    """A run with several gyms: each gym's `train/<label>/reward` and `val/<label>/reward_mean`
    over the steps (empty for a one-gym run, which logs neither)."""
    keys = sorted(
        {
            k
            for m in metrics
            for k in m
            if (k.startswith("train/") and k.endswith("/reward"))
            or (k.startswith("val/") and k.endswith("/reward_mean") and k.count("/") == 2)
        }
    )
    return {k: [(int(m["step"]), float(m[k])) for m in metrics if k in m] for k in keys}


def _read_eval(folder: Path, name: str, data: ViewData) -> None:
    model = ""
    config = folder / "eval_config.json"
    if config.exists():
        try:
            model = str(json.loads(config.read_text()).get("model", ""))
        except ValueError:
            model = ""
    label = f"{name} · eval of {model}" if model else f"{name} · eval"
    ckpt = Checkpoint(key=name, label=label, source=name)
    data.checkpoints.append(ckpt)
    from mua.eval.audit import read_audit

    audit = read_audit(folder)
    if audit is not None:
        data.audits[name] = audit
    for i, line in enumerate((folder / "results.jsonl").read_text(encoding="utf-8").splitlines()):
        try:
            data.records.append(_record(json.loads(line), ckpt, i))
        except (ValueError, TypeError):
            continue


def load_view_data(paths: list[str | Path]) -> ViewData:
    roots = [Path(p) for p in paths]
    data = ViewData()
    for folder in find_sources(paths):
        name = _label(folder, roots)
        if _is_run(folder):
            _read_run(folder, name, data)
        else:
            _read_eval(folder, name, data)
    if not data.records:
        raise UsageError(
            f"no transcripts under {', '.join(map(str, paths))} yet: training writes them every "
            "step (track.transcripts_per_step > 0), `mua eval` into results.jsonl"
        )
    return data
