"""Whether a tau2 evaluation's numbers mean what tau2's leaderboard numbers mean.

`verdict(config, rows)` compares an evaluation (its `eval_config.json` and result rows) with
how tau2-bench's leaderboard runs: `profile: leaderboard` on a checkout (tau2's prompts and tool
schemas), tau2's default user model and temperature and NL-assertion judge model and
temperature, its error limit and a turn budget its step limit fits in (read from the
checkout's `config.py`), `LEADERBOARD_TRIALS`
trials per task, the
full reward basis (NL assertions judged), and every task of each domain's `base` split.
It returns `(version, commit, differences)`; `line(...)` writes the one line the report and
`mua eval` print: "comparable with tau2 v1.0.1 leaderboard: yes", or ": no (...)" listing
each difference; `report_lines(out_dir)` adds the checkout's version and commit.
`is_tau2_row(row)` says which result rows are tau2's: a row's `gym` is its entry's label (a
labelled entry's `tau2_retail`), so rows are known by their task ids (`tau2-<domain>-<id>`);
trials are counted per entry and task. Not here: computing the numbers (report.py).
"""

from __future__ import annotations

import json
from collections import defaultdict

from gyms.tau2.leaderboard.checkout import data_folder, find_checkout
from gyms.tau2.leaderboard.source import SourceError, Tau2Source

LEADERBOARD_TRIALS = 4  # tau2's leaderboard reports pass^k over 4 trials per task
LEADERBOARD_SPLIT = "base"
TASK_PREFIX = "tau2-"  # every tau2 task id (tasks.py): tau2-<domain>-<tau2's id>


def is_tau2_row(row: dict) -> bool:
    """Whether a result row is a tau2 trajectory's, whatever its entry's label."""
    return str(row.get("task_id", "")).startswith(TASK_PREFIX)


def _domain(task_id: str) -> str:
    parts = str(task_id).split("-")
    if len(parts) > 2 and parts[1] == "telecom" and parts[2] == "workflow":
        return "telecom-workflow"
    return parts[1] if len(parts) > 1 else "?"


def _judge(options: dict, user: dict) -> tuple[str | None, float | None]:
    judge = options.get("judge")
    if judge == "user":
        return user.get("model"), user.get("temperature")
    if isinstance(judge, dict):
        return judge.get("model"), judge.get("temperature")
    return None, None


def verdict(config: dict, rows: list[dict]) -> tuple[str | None, str | None, list[str]]:
    options = (config.get("gym_options") or {}).get("tau2") or {}
    user = config.get("user") or {}
    data_dir = options.get("data_dir")
    checkout = find_checkout(data_dir) if data_dir else None
    diffs: list[str] = []
    defaults: dict = {}
    if checkout is None:
        diffs.append("prompts: mua's own (no tau2-bench checkout in gym.options.data_dir)")
    else:
        try:
            defaults = Tau2Source(checkout).defaults()
        except SourceError as err:
            diffs.append(f"checkout: {err}")
        if options.get("profile", "mua") != "leaderboard":
            diffs.append("prompts: mua's own wording (set gym.options.profile: leaderboard)")
    want_user = defaults.get("DEFAULT_LLM_USER")
    want_user_t = defaults.get("DEFAULT_LLM_TEMPERATURE_USER")
    if config.get("users"):
        diffs.append("users: a user matrix (eval.users) plays the user, not tau2's user alone")
    if user.get("kind") != "llm":
        diffs.append(f"user: {user.get('kind') or 'scripted'}, not an LLM user")
    else:
        if want_user is not None and user.get("model") != want_user:
            diffs.append(f"user model: {user.get('model')}, not {want_user}")
        if want_user_t is not None and user.get("temperature") != want_user_t:
            diffs.append(f"user temperature: {user.get('temperature')}, not {want_user_t}")
    want_steps, max_turns = defaults.get("DEFAULT_MAX_STEPS"), config.get("max_turns")
    if want_steps is not None and max_turns is not None and 2 * max_turns < want_steps:
        diffs.append(
            f"max_turns: {max_turns} agent turns, fewer than tau2's {want_steps} steps allow "
            f"(set max_turns: {want_steps // 2})"
        )
    want_errors = defaults.get("DEFAULT_MAX_ERRORS")
    if want_errors is not None and options.get("max_errors", 10) != want_errors:
        diffs.append(f"max_errors: {options.get('max_errors')}, not {want_errors}")
    if options.get("basis", "tau2") != "tau2":
        diffs.append(f"basis: {options.get('basis')} (NL assertions not judged)")
    else:
        model, temperature = _judge(options, user)
        want_judge = defaults.get("DEFAULT_LLM_NL_ASSERTIONS")
        want_judge_t = defaults.get("DEFAULT_LLM_NL_ASSERTIONS_TEMPERATURE")
        if model is None:
            diffs.append("judge: none set")
        elif want_judge is not None and model != want_judge:
            diffs.append(f"judge model: {model}, not {want_judge}")
        if model is not None and want_judge_t is not None and temperature != want_judge_t:
            diffs.append(f"judge temperature: {temperature}, not {want_judge_t}")
    fewest, tasks_by_domain = _trials(rows)
    if fewest != LEADERBOARD_TRIALS:
        diffs.append(f"trials: {fewest} per task, not {LEADERBOARD_TRIALS}")
    if checkout is not None:
        diffs += _split_differences(checkout, tasks_by_domain)
    return (
        checkout.version if checkout else None,
        checkout.commit if checkout else None,
        diffs,
    )


def _trials(rows: list[dict]) -> tuple[int, dict[str, set]]:
    """The fewest trials of a task within one entry (rows of two labelled entries are two
    runs), and the task ids seen per domain."""
    trials: dict[tuple, int] = defaultdict(int)
    tasks_by_domain: dict[str, set] = defaultdict(set)
    for row in filter(is_tau2_row, rows):
        task_id = str(row["task_id"])
        trials[(row.get("gym"), task_id)] += 1
        tasks_by_domain[_domain(task_id)].add(task_id)
    return min(trials.values(), default=0), tasks_by_domain


def _split_differences(checkout, tasks_by_domain: dict[str, set]) -> list[str]:
    out = []
    root = data_folder(checkout.root) / "tau2" / "domains"
    for domain, seen in sorted(tasks_by_domain.items()):
        split_file = root / domain / "split_tasks.json"
        if not split_file.is_file():
            continue
        base = json.loads(split_file.read_text(encoding="utf-8")).get(LEADERBOARD_SPLIT) or []
        wanted = {f"tau2-{domain}-{i}" for i in base}
        if seen != wanted:
            out.append(
                f"tasks: {domain} has {len(seen & wanted)} of the {len(wanted)} "
                f"{LEADERBOARD_SPLIT} tasks"
                + (f" and {len(seen - wanted)} others" if seen - wanted else "")
            )
    return out


def line(version: str | None, diffs: list[str]) -> str:
    name = f"tau2 v{version}" if version else "tau2"
    if not diffs:
        return f"comparable with {name} leaderboard: yes"
    return f"comparable with {name} leaderboard: no ({'; '.join(diffs)})"


def checkout_line(version: str | None, commit: str | None) -> str:
    return f"tau2-bench checkout: version {version or 'unknown'}, commit {commit or 'unknown'}"


def report_lines(out_dir) -> list[str]:
    """The lines `mua eval` and the report print for an eval folder holding tau2 rows."""
    from pathlib import Path

    out_dir = Path(out_dir)
    config = json.loads((out_dir / "eval_config.json").read_text())
    rows = [
        json.loads(x) for x in (out_dir / "results.jsonl").read_text().splitlines() if x.strip()
    ]
    rows = [r for r in rows if is_tau2_row(r) and not r.get("excluded")]
    version, commit, diffs = verdict(config, rows)
    lines = [line(version, diffs)]
    if version or commit:
        lines.append(checkout_line(version, commit))
    return lines
