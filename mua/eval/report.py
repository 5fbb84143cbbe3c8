"""What an evaluation leaves behind: a Rich table, `summary.json`, and an MLflow run.

The MLflow store is `track.mlflow_uri`, else $MLFLOW_TRACKING_URI, else sqlite in the output
folder; a resumed evaluation continues the same MLflow run (id kept in `mlflow_run_id`). Metrics
are logged as `<gym>/<metric>`; summary.json and results.jsonl as artifacts. URL credentials are
redacted from everything written. Does not compute.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

from mua.eval.summary import flat_metrics
from mua.redact import redact_secrets, redact_urls

SUMMARY_FILE = "summary.json"


def _num(value, digits: int = 3) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "–"
    return f"{value:.{digits}f}" if isinstance(value, float) else str(value)


MACRO_KEYS = ("reward_mean", "success_rate", "turns_mean")


def macro_cells(summaries: dict[str, dict]) -> dict[str, dict]:
    """The summaries a macro average is over: all, or with a user matrix the recipe's own user's."""
    from mua.config.track import TRAIN_USER
    from mua.users.matrix import split_cell

    if any(split_cell(key)[1] is not None for key in summaries):
        return {k: s for k, s in summaries.items() if split_cell(k)[1] == TRAIN_USER}
    return summaries


def unscored(summaries: dict[str, dict]) -> list[str]:
    """The gyms (cells) of which no trajectory was scored."""
    return [key for key, s in summaries.items() if s["num_trajectories"] == s["excluded"]]


def macro_blocked(summaries: dict[str, dict]) -> list[str]:
    """The gyms a macro average would be over on which nothing was scored: with any, there is
    no macro average (a mean that skipped them would not be over every gym)."""
    cells = macro_cells(summaries)
    return unscored(cells) if len(cells) > 1 else []


def macro_average(summaries: dict[str, dict]) -> dict[str, float]:
    """With several gyms, the unweighted mean over gyms of each gym's own mean (reward, success,
    turns, and pass@k / pass^k where every gym has them): a gym with few tasks counts as much as
    one with many. With a user matrix (keys `<gym>@<user>`), over the cells of the recipe's own
    user only. Empty for one gym, and when one of them had nothing scored (`macro_blocked`)."""
    if macro_blocked(summaries):
        return {}
    summaries = macro_cells(summaries)
    if len(summaries) < 2:
        return {}
    out = {}
    keys = [
        *MACRO_KEYS,
        *sorted({k for s in summaries.values() for k in s if k.startswith("pass")}),
    ]
    for key in keys:
        values = [s.get(key) for s in summaries.values()]
        if all(isinstance(v, (int, float)) and math.isfinite(v) for v in values):
            out[key] = sum(values) / len(values)
    return out


SCORE_LEGEND = "tasks×n: tasks × samples per task; baseline: the gym's trivial policy's reward"
ERROR_LEGEND = (
    "parse/tool: turns the agent's reply did not parse / tool calls that failed; "
    "excl: trajectories excluded from scores (the user failed); "
    "user: the LLM user's retries/429 answers/timed-out attempts"
)


def _table(title: str | None, columns: tuple[str, ...], caption: str | None = None):
    """A table whose every header fits whole: each column is at least as wide as its header, and a
    cell too long for its column wraps (never cut with an ellipsis)."""
    from rich.table import Table

    table = Table(title=title, caption=caption, caption_justify="left")
    for col in columns:
        table.add_column(
            col,
            justify="left" if col in ("gym", "components", "ended") else "right",
            min_width=len(col),
            overflow="fold",
        )
    return table


def summary_table(summaries: dict[str, dict], title: str):
    """What `mua eval` prints, in tables narrow enough to read whole at 100 columns: the scores (one
    row per gym, then with several gyms a `macro avg` row, the unweighted mean over gyms of reward,
    success, pass@k and turns: `macro_average`), pass@k and pass^k, the errors and how trajectories
    ended (with the LLM user's retries, 429 answers and timed-out attempts when a gym had one), and
    each reward component's mean when a gym reports components."""
    from rich.console import Group

    pass_keys = sorted(
        {k for s in summaries.values() for k in s if k.startswith("pass")},
        key=lambda k: (k[4], int(k[5:])),
    )
    macro = macro_average(summaries)
    scores = _table(
        title,
        ("gym", "tasks×n", "reward", "success", "turns", "tokens", "baseline"),
        SCORE_LEGEND,
    )
    for gym, s in summaries.items():
        scores.add_row(
            gym,
            f"{s['num_tasks']}×{s['num_trajectories'] // max(s['num_tasks'], 1)}",
            _num(s["reward_mean"]),
            _num(s["success_rate"]),
            _num(s["turns_mean"], 1),
            _num(s["tokens_mean"], 0),
            _num(s["trivial_baseline"]),
        )
    if macro:
        scores.add_section()
        scores.add_row(
            "macro avg",
            f"{len(macro_cells(summaries))} gyms",
            _num(macro.get("reward_mean")),
            _num(macro.get("success_rate")),
            _num(macro.get("turns_mean"), 1),
            "",
            "",
        )
    parts = [scores]
    if pass_keys:
        passes = _table(None, ("gym", *pass_keys))
        for gym, s in summaries.items():
            passes.add_row(gym, *[_num(s.get(k)) for k in pass_keys])
        if macro:
            passes.add_section()
            passes.add_row("macro avg", *[_num(macro.get(k)) for k in pass_keys])
        parts.append(passes)
    user_calls = any("user_requests" in s for s in summaries.values())
    errors = _table(
        None,
        ("gym", "parse", "tool", "excl", *(["user"] if user_calls else []), "ended"),
        ERROR_LEGEND if user_calls else ERROR_LEGEND.rsplit("; ", 1)[0],
    )
    for gym, s in summaries.items():
        errors.add_row(
            gym,
            str(s["parse_failures"]),
            str(s.get("tool_errors", 0)),
            str(s["excluded"]),
            *([_user_calls(s)] if user_calls else []),
            ", ".join(f"{k} {v}" for k, v in s["terminations"].items()),
        )
    parts.append(errors)
    if any(s.get("components") for s in summaries.values()):
        components = _table(None, ("gym", "components"))
        for gym, s in summaries.items():
            components.add_row(gym, _components(s))
        parts.append(components)
    return Group(*parts)


BLAME_LEGEND = (
    "failed: share of scored conversations that failed (unscored: none was scored); "
    "agent/user/tool/budget: share of scored conversations whose failure is blamed on each "
    "(see docs/user_population.md)"
)
BLAME_LABELS = ("agent", "user", "tool", "budget")
MATRIX_LEGEND = (
    "*: the recipe's own user (the one training ran against); spread: max − min across users; "
    "gap: training user − mean of the held-out users"
)
NOT_RUN = "not run"  # the cells of an `eval.users` entry whose endpoint failed its preflight


def _blame_cells(summary: dict | None) -> list[str]:
    """failed, then each label's rate; `unscored` where nothing was scored, `not run` for a
    user left out (summary None), then dashes."""
    if summary is None or summary["num_trajectories"] == summary["excluded"]:
        return [NOT_RUN if summary is None else "unscored", *["–"] * len(BLAME_LABELS)]
    rates = (summary.get("blame") or {}).get("rates", {})
    failed = sum(v for v in rates.values() if isinstance(v, float) and math.isfinite(v))
    cells = [_num(failed if rates else None, 2)]
    cells += [_num(rates.get(label), 2) for label in BLAME_LABELS]
    return cells


def blame_table(summaries: dict[str, dict]):
    """Each gym's failures by blame label (a plain evaluation: one row per gym)."""
    table = _table(None, ("gym", "failed", "agent", "user", "tool", "budget"), BLAME_LEGEND)
    for gym, s in summaries.items():
        table.add_row(gym, *_blame_cells(s))
    return table


def _matrix_rows(summaries: dict[str, dict], not_run) -> list[tuple[str, str, dict | None]]:
    """(gym, user, summary) gym by gym: the cells evaluated, then a None per user not run."""
    from mua.users.matrix import split_cell

    cells = [(*split_cell(label), s) for label, s in summaries.items()]
    rows = []
    for gym in dict.fromkeys(gym for gym, _, _ in cells):
        rows += [cell for cell in cells if cell[0] == gym]
        rows += [(gym, user, None) for user in not_run]
    return rows


def user_matrix_table(
    summaries: dict[str, dict],
    matrix: dict[str, dict],
    title: str | None = None,
    not_run: dict[str, str] | None = None,
):
    """The gym × user tables, each narrow enough for 100 columns: pass^k per user (with the
    user-blamed failures left out beside it when they were), the blame rates, then per gym the
    spread across users and the training gap. A user in `not_run` ({label: why}) gets a
    `not run` row in every gym."""
    from rich.console import Group

    from mua.config.track import TRAIN_USER

    pass_keys = sorted(
        {k for s in summaries.values() for k in s if k.startswith("pass^")},
        key=lambda k: int(k[5:]),
    )
    without = any("without_user_failures" in s for s in summaries.values())
    scores = _table(
        title,
        ("gym", "user", *pass_keys, *([f"{k} excl. user" for k in pass_keys] if without else [])),
        MATRIX_LEGEND.split("; ")[0]
        + ("; excl. user: without the failures blamed on the user" if without else "")
        + (f"; {NOT_RUN}: its endpoint failed (see below)" if not_run else ""),
    )
    blame = _table(
        None, ("gym", "user", "failed", "agent", "user fail", "tool", "budget"), BLAME_LEGEND
    )
    previous = None
    for gym, user, s in _matrix_rows(summaries, not_run or {}):
        if previous is not None and gym != previous:
            scores.add_section()
            blame.add_section()
        previous = gym
        who = f"{user}*" if user == TRAIN_USER else str(user)
        columns = len(pass_keys) * (2 if without else 1)
        if s is None:
            scores.add_row(gym, who, *([NOT_RUN, *["–"] * (columns - 1)] if columns else []))
        else:
            kept = s.get("without_user_failures") or {}
            scores.add_row(
                gym,
                who,
                *[_num(s.get(k)) for k in pass_keys],
                *([_num(kept.get(k)) for k in pass_keys] if without else []),
            )
        blame.add_row(gym, who, *_blame_cells(s))
    spread = _table(None, ("gym", "measure", "spread", "gap"), MATRIX_LEGEND.split("; ", 1)[1])
    for gym, entry in matrix.items():
        spread.add_row(gym, entry["pass_key"], _num(entry["spread"]), _num(entry["train_gap"]))
    return Group(scores, blame, spread)


AUDIT_LEGEND = "fidelity: share of the user's audited turns that broke no rule of its task"


def audit_table(fidelity: dict[str, float | None]):
    """The simulator audit: each user's fidelity, most faithful first."""
    table = _table("simulator audit", ("user", "fidelity"), AUDIT_LEGEND)
    for user, value in fidelity.items():
        table.add_row(user, _num(value, 2))
    return table


def _components(summary: dict) -> str:
    """Each reward component's mean (a pass rate for pass/fail checks), e.g. `db 1.00, communicate 0.50`."""
    return ", ".join(f"{name} {mean:.2f}" for name, mean in summary.get("components", {}).items())


def _user_calls(summary: dict) -> str:
    if "user_requests" not in summary:
        return "–"
    return "/".join(str(summary[k]) for k in ("user_retries", "user_rate_limited", "user_timeouts"))


def _json_safe(value):
    """NaN/inf (an empty metric) -> null, recursively."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return value


def write_summary(out_dir: Path, summaries: dict[str, dict], meta: dict) -> Path:
    path = Path(out_dir) / SUMMARY_FILE
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    macro = macro_average(summaries)
    extra = {"macro_average": macro} if macro else {}
    clean = redact_secrets(_json_safe({**meta, "gyms": summaries, **extra}))
    tmp.write_text(json.dumps(clean, indent=2, sort_keys=True, default=str) + "\n")
    os.replace(tmp, path)
    return path


def log_mlflow(recipe, out_dir: Path, summaries: dict[str, dict], meta: dict) -> str:
    """Log params, metrics and files; returns the tracking URI (for 'where to look')."""
    import mlflow

    from mua.track.tracker import flatten_params, metric_name, open_experiment, tracking_uri

    uri = tracking_uri(recipe.track.mlflow_uri, out_dir)
    open_experiment(mlflow, uri, recipe.track.experiment)
    id_file = Path(out_dir) / "mlflow_run_id"
    run_id = id_file.read_text().strip() if id_file.exists() else None
    with mlflow.start_run(
        run_id=run_id, run_name=recipe.track.run_name or f"eval {meta['model']}"
    ) as run:
        if run_id is None:
            id_file.write_text(run.info.run_id)
            params = {
                **flatten_params(recipe.model_dump(mode="json")),
                **{
                    f"eval.{k}": str(v)
                    for k, v in meta.items()
                    if k not in ("notes", "user_matrix", "user_audit", "users_not_run")
                },
            }
            items = list(redact_urls(params).items())
            for i in range(0, len(items), 100):
                mlflow.log_params(dict(items[i : i + 100]))
        macro = macro_average(summaries)
        metrics = {
            metric_name(k): v
            for k, v in flat_metrics({**summaries, **({"macro": macro} if macro else {})}).items()
        }
        mlflow.log_metrics(metrics)
        for name in (SUMMARY_FILE, "results.jsonl", "blame.jsonl", "user_audit.json"):
            if (Path(out_dir) / name).exists():
                mlflow.log_artifact(str(Path(out_dir) / name))
    return uri
