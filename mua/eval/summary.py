"""Result rows and per-gym summaries of an evaluation (pure Python, no I/O, no torch).

A result row is one trajectory reduced to what evaluation reports and `results.jsonl` holds;
`summarize` turns one gym's rows into its summary (reward, success, pass@k, pass^k, turns,
tokens, parse and tool errors, drift, terminations, `excluded`, trivial baseline, reward
components; docs/eval.md). Rows are sorted by (task position, sample) before any sum, so a
resumed evaluation summarises to exactly the same numbers. Not here: rollouts, writing files.
"""

from __future__ import annotations

import math
from collections import Counter

from mua.algo.pass_metrics import mean_pass_at_k, mean_pass_hat_k

EXCLUDED_TERMINATIONS = ("user_failure",)  # an API failure is never scored as reward 0
# a reward within this of the threshold succeeds: rules that round each step's reward to six
# digits (UserRL's persuade pays 0.333333 three times) sum to 0.999999 for a full win
SUCCESS_EPS = 1e-5


def result_row(traj, gym: str, success_threshold: float = 1.0) -> dict:
    """The result row of one finished trajectory (`mua.rollout.trajectory.Trajectory`)."""
    metrics = traj.metrics or {}
    excluded = traj.termination in EXCLUDED_TERMINATIONS
    return {
        "gym": gym,
        "task_id": traj.task_id,
        "sample_index": int(traj.sample_index),
        "reward": float(traj.reward),
        "success": (not excluded) and float(traj.reward) >= success_threshold - SUCCESS_EPS,
        "excluded": excluded,
        "termination": traj.termination,
        "detail": traj.detail,
        "num_turns": int(traj.num_turns),
        "tokens": int(metrics.get("tokens", len(traj.token_ids))),
        "assistant_tokens": int(metrics.get("assistant_tokens", 0)),
        "parse_errors": int(metrics.get("parse_errors", 0)),
        "tool_errors": {
            k.split("/", 1)[1]: int(v) for k, v in metrics.items() if k.startswith("tool_errors/")
        },
        "drift": bool(metrics.get("drift", 0.0)),
        "reward_components": dict(traj.reward_components or {}),
        "messages": traj.messages,
    }


def row_key(row: dict) -> tuple[str, str, int]:
    return (row["gym"], str(row["task_id"]), int(row["sample_index"]))


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else float("nan")


def _std(values: list[float]) -> float:
    if len(values) < 2:
        return 0.0 if values else float("nan")
    mu = _mean(values)
    return math.sqrt(sum((v - mu) ** 2 for v in values) / (len(values) - 1))


def ordered(rows: list[dict], task_order: list[str] | None = None) -> list[dict]:
    """Rows sorted by task position (given order, else task id) then sample index."""
    position = {t: i for i, t in enumerate(task_order or [])}
    return sorted(
        rows,
        key=lambda r: (
            position.get(str(r["task_id"]), len(position)),
            str(r["task_id"]),
            int(r["sample_index"]),
        ),
    )


def pass_metrics(scored: list[dict], k_values: list[int]) -> dict[str, float]:
    """pass@k and pass^k over tasks, for every k no larger than the fewest samples of a task."""
    per_task: dict[str, list[bool]] = {}
    for row in scored:
        per_task.setdefault(str(row["task_id"]), []).append(bool(row["success"]))
    if not per_task:
        return {}
    trials = [(len(v), sum(v)) for v in per_task.values()]
    fewest = min(n for n, _ in trials)
    out = {}
    for k in sorted(set(k_values)):
        if 1 <= k <= fewest:
            out[f"pass@{k}"] = mean_pass_at_k(trials, k)
            out[f"pass^{k}"] = mean_pass_hat_k(trials, k)
    return out


def summarize(
    rows: list[dict],
    k_values: list[int] = (1,),
    task_order: list[str] | None = None,
    trivial_baseline: float | None = None,
) -> dict:
    """The summary of one gym's rows (see the module docstring for the keys)."""
    rows = ordered(rows, task_order)
    scored = [r for r in rows if not r.get("excluded")]
    rewards = [float(r["reward"]) for r in scored]
    summary = {
        "num_tasks": len({str(r["task_id"]) for r in rows}),
        "num_trajectories": len(rows),
        "reward_mean": _mean(rewards),
        "reward_std": _std(rewards),
        "success_rate": _mean([float(r["success"]) for r in scored]),
        **pass_metrics(scored, list(k_values)),
        "turns_mean": _mean([float(r["num_turns"]) for r in rows]),
        "tokens_mean": _mean([float(r["tokens"]) for r in rows]),
        "assistant_tokens_mean": _mean([float(r["assistant_tokens"]) for r in rows]),
        "parse_failures": sum(int(r["parse_errors"]) for r in rows),
        "parse_failure_rate": _mean([float(r["parse_errors"] > 0) for r in rows]),
        "tool_errors": sum(sum(r.get("tool_errors", {}).values()) for r in rows),
        "drift_rate": _mean([float(r.get("drift", False)) for r in rows]),
        "excluded": len(rows) - len(scored),
        "excluded_detail": next(
            (str(r.get("detail") or "")[:300] for r in rows if r.get("excluded")), None
        ),
        "terminations": dict(sorted(Counter(r["termination"] for r in rows).items())),
        "trivial_baseline": trivial_baseline,
        "components": component_means(scored),
    }
    return summary


def component_means(scored: list[dict]) -> dict[str, float]:
    """Each reward component's mean over the rows that carry it, by name."""
    values: dict[str, list[float]] = {}
    for row in scored:
        for name, value in (row.get("reward_components") or {}).items():
            values.setdefault(name, []).append(float(value))
    return {name: _mean(v) for name, v in sorted(values.items())}


def flat_metrics(summaries: dict[str, dict], prefix: str = "") -> dict[str, float]:
    """{gym: summary} -> {"<prefix><gym>/<metric>": float} of the finite numbers (for MLflow)."""
    out: dict[str, float] = {}
    for gym, summary in summaries.items():
        for key, value in summary.items():
            if key == "terminations":
                for reason, count in value.items():
                    out[f"{prefix}{gym}/termination/{reason}"] = float(count)
            elif key == "blame":
                for label, rate in value.get("rates", {}).items():
                    if isinstance(rate, float) and math.isfinite(rate):
                        out[f"{prefix}{gym}/blame/{label}"] = rate
            elif key == "components":
                for name, mean in value.items():
                    out[f"{prefix}{gym}/component/{name}"] = float(mean)
            elif (
                isinstance(value, (int, float))
                and not isinstance(value, bool)
                and math.isfinite(value)
            ):
                out[f"{prefix}{gym}/{key}"] = float(value)
    return out
