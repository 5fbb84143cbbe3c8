"""A tau2 results table from a `mua eval` folder: per domain, tau2's pass^k, each reward
component's pass rate, tau2's termination reasons, the user model and comparability.

    python -m gyms.tau2.report <eval out dir>
    python -m gyms.tau2.report --rescore <eval out dir> [--data <checkout or data folder>]

pass^k is tau2's estimator: per task with n trials and c successes (reward 1), C(c,k)/C(n,k),
averaged over tasks, for k = 1..n. A component's pass rate is the share of trials, among
those whose task has that component in its basis, where it scored 1. Termination reasons are
read from each conversation's end as tau2 names them (user_stop, agent_stop,
too_many_errors, or the runner's own reason, e.g. max_turns). The first line says whether the
numbers are comparable with tau2's leaderboard, or lists each difference
(`leaderboard/comparable.py`); the checkout's version and commit follow when there is one.
"""

from __future__ import annotations

import json
import sys
from collections import Counter, defaultdict
from math import comb
from pathlib import Path

from gyms.tau2.leaderboard.comparable import checkout_line, is_tau2_row, line, verdict
from gyms.tau2.rescore import domain_of, termination_of

COMPONENT_ORDER = ("db", "env_assertion", "action", "communicate", "nl_assertion")


def pass_hat_k(n: int, c: int, k: int) -> float:
    return comb(c, k) / comb(n, k)


def summarize(out_dir: Path, results: str = "results.jsonl") -> dict:
    rows = [json.loads(line) for line in (out_dir / results).read_text().splitlines() if line]
    config = json.loads((out_dir / "eval_config.json").read_text())
    options = (config.get("gym_options") or {}).get("tau2") or {}
    user = config.get("user") or {}
    by_domain: dict[str, list[dict]] = defaultdict(list)
    scored = [r for r in rows if is_tau2_row(r) and not r.get("excluded")]
    for row in scored:
        by_domain[domain_of(str(row["task_id"]))].append(row)
    version, commit, differences = verdict(config, scored)
    out = {
        "user_model": user.get("model") if user.get("kind") == "llm" else "scripted",
        "basis": options.get("basis", "tau2"),
        "profile": options.get("profile", "mua"),
        "comparable_with_tau2": not differences,
        "differences": differences,
        "tau2_checkout": {"version": version, "commit": commit},
        "domains": {},
    }
    for domain, items in sorted(by_domain.items()):
        trials: dict[str, list[bool]] = defaultdict(list)
        for row in items:
            trials[str(row["task_id"])].append(float(row["reward"]) >= 1.0 - 1e-6)
        n = min(len(v) for v in trials.values())
        passes = {
            f"pass^{k}": sum(pass_hat_k(len(v), sum(v), k) for v in trials.values()) / len(trials)
            for k in range(1, n + 1)
        }
        comps: dict[str, list[float]] = defaultdict(list)
        for row in items:
            for name, value in (row.get("reward_components") or {}).items():
                comps[name].append(float(value))
        out["domains"][domain] = {
            "tasks": len(trials),
            "trials": len(items),
            "reward_mean": sum(float(r["reward"]) for r in items) / len(items),
            **passes,
            "component_pass_rate": {
                c: sum(comps[c]) / len(comps[c]) for c in COMPONENT_ORDER if comps.get(c)
            },
            "terminations": dict(Counter(termination_of(r) for r in items)),
        }
    return out


USAGE = (
    "usage: python -m gyms.tau2.report [--rescore [--data <tau2 checkout or data folder>]] "
    "<mua eval output folder>"
)


def main(argv: list[str]) -> None:
    argv = list(argv)
    rescoring, data_flag = "--rescore" in argv, "--data" in argv
    data = None
    if rescoring:
        argv.remove("--rescore")
    if "--data" in argv:
        at = argv.index("--data")
        data = argv[at + 1] if at + 1 < len(argv) else None
        del argv[at : at + 2]
    if (
        len(argv) != 1
        or not (Path(argv[0]) / "results.jsonl").is_file()
        or (data_flag and not data)
    ):
        print(USAGE, file=sys.stderr)
        raise SystemExit(2)
    results = "results.jsonl"
    if rescoring:
        from gyms.tau2.rescore import RESCORED, rescore
        from mua.errors import UsageError

        try:
            counts = rescore(Path(argv[0]), data)
        except UsageError as err:
            print(str(err), file=sys.stderr)
            raise SystemExit(2) from None
        print(
            f"rescored {counts['rescored']} conversations with the current task definitions "
            f"({counts['changed']} rewards changed; {counts['kept']} kept as saved: their user's "
            f"tool calls are not in the results) -> {Path(argv[0]) / RESCORED}"
        )
        results = RESCORED
    summary = summarize(Path(argv[0]), results)
    checkout = summary["tau2_checkout"]
    print(line(checkout["version"], summary["differences"]))
    if checkout["version"] or checkout["commit"]:
        print(checkout_line(checkout["version"], checkout["commit"]))
    print(
        f"user: {summary['user_model']} · basis: {summary['basis']} · profile: {summary['profile']}"
    )
    for domain, s in summary["domains"].items():
        ks = " ".join(f"{k}={v:.3f}" for k, v in s.items() if k.startswith("pass^"))
        comps = " ".join(f"{k}={v:.3f}" for k, v in s["component_pass_rate"].items())
        print(
            f"{domain}: tasks={s['tasks']} trials={s['trials']} reward={s['reward_mean']:.3f} "
            f"{ks} | {comps} | {s['terminations']}"
        )


if __name__ == "__main__":
    main(sys.argv[1:])
