"""Does the CPU quickstart learn as well with asynchronous steps as without? Per seed, paired.

    python scripts/async_learns.py --seeds 0-11 [--out runs/async_learns]
        [--recipe quickstart_async.yaml] [--name quickstart_async] [--set algo.correction=decoupled]
        [--sync-name quickstart_kl --sync-recipe quickstart.yaml] [--judge-only]

For each seed the synchronous run is the demo's own RL phase (`recipes/quickstart.yaml`, built
with the seed's SFT start in OUT/sft_start/seed_S by `mua.demo.run_demo`); the asynchronous run
repeats only the RL, merge and evaluation phases with `--recipe` from that SFT model, in
OUT/NAME/seed_S (`scripts/lora_learns.py` does the running). Both are evaluated on the same
held-out tasks, so the comparison is paired by seed. With `--sync-name NAME2` the synchronous arm is
OUT/NAME2/seed_S instead, run from the same SFT model with `--sync-recipe` (default
`quickstart.yaml`) and the same `--set` overrides: how to compare the two modes under a setting
other than the demo's own (e.g. `--set algo.kl.coef=0.05`).

The judgement (docs/async_rl.md, "Does the asynchronous quickstart learn as well..."):
(a1) the asynchronous mean held-out reward lies inside the synchronous seed spread; (a2) the
one-sided 95% paired-bootstrap lower bound of mean(async - sync) is above -margin (the exact
sign-flip p-value of H0: mean <= -margin is reported too); (b) the one-sided Fisher exact test
of "more asynchronous collapses" does not reject at 5%. A run that stopped before its last step
counts as reward 0; a run is collapsed if it stopped or ended below its SFT start.

Prints a line per seed and the verdict, writes OUT/NAME/judgement.json, exits 0 when the
criterion holds and 1 when it does not. It does not judge single runs, only the paired set.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts"))

MARGIN = 0.03
LEVEL = 0.05
RESAMPLES = 10_000


def parse_seeds(text: str) -> list[int]:
    """'0-3,7' -> [0, 1, 2, 3, 7]."""
    seeds: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if "-" in part:
            lo, hi = part.split("-")
            seeds.extend(range(int(lo), int(hi) + 1))
        elif part:
            seeds.append(int(part))
    return seeds


def run_outcome(folder: Path, sft_reward: float) -> dict:
    """Held-out reward of one run folder (eval_rl/ after rl/), 0 if it stopped early; None if absent."""
    summary = folder / "eval_rl" / "summary.json"
    metrics = folder / "rl" / "metrics.jsonl"
    steps = []
    if metrics.is_file():
        steps = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
    tail = [s["reward/mean"] for s in steps[-5:] if "reward/mean" in s]
    entropy = [s["actor/entropy"] for s in steps if "actor/entropy" in s]
    info = {
        "steps": steps[-1]["step"] if steps else 0,
        "train_reward_last5": sum(tail) / len(tail) if tail else None,
        "entropy_max": max(entropy) if entropy else None,
    }
    if summary.is_file():
        reward = float(json.loads(summary.read_text())["gyms"]["guess"]["reward_mean"])
        return {"reward": reward, "stopped": False, "collapsed": reward < sft_reward, **info}
    if (folder / "failed.txt").is_file():
        return {"reward": 0.0, "stopped": True, "collapsed": True, **info}
    return None


def bootstrap_lower_bound(diffs: list[float], level: float = LEVEL, seed: int = 0) -> float:
    """One-sided (1 - level) lower bound of the mean of `diffs`, percentile bootstrap over items."""
    x = np.asarray(diffs, dtype=float)
    rng = np.random.default_rng(seed)
    means = x[rng.integers(0, len(x), size=(RESAMPLES, len(x)))].mean(axis=1)
    return float(np.quantile(means, level))


def sign_flip_p(diffs: list[float], margin: float) -> float:
    """Exact one-sided p of H0: mean(diffs) <= -margin, flipping the signs of diffs + margin."""
    shifted = [d + margin for d in diffs]
    observed = sum(shifted)
    patterns = itertools.product((1, -1), repeat=len(shifted))
    hits = sum(sum(s * v for s, v in zip(p, shifted)) >= observed - 1e-12 for p in patterns)
    return hits / 2 ** len(shifted)


def fisher_more_p(a_hits: int, a_n: int, b_hits: int, b_n: int) -> float:
    """One-sided Fisher exact p that group a has a higher rate than group b (hypergeometric tail)."""
    total_hits, total = a_hits + b_hits, a_n + b_n
    denom = math.comb(total, a_n)
    upper = min(total_hits, a_n)
    return (
        sum(
            math.comb(total_hits, k) * math.comb(total - total_hits, a_n - k)
            for k in range(a_hits, upper + 1)
        )
        / denom
    )


def judge(rows: list[dict], margin: float = MARGIN) -> dict:
    """The verdict over paired rows {'seed', 'sync', 'async', 'sync_collapsed', 'async_collapsed'}."""
    sync = [r["sync"] for r in rows]
    asyn = [r["async"] for r in rows]
    diffs = [a - s for a, s in zip(asyn, sync)]
    n = len(rows)
    async_mean = sum(asyn) / n
    lower = bootstrap_lower_bound(diffs)
    sync_collapses = sum(r["sync_collapsed"] for r in rows)
    async_collapses = sum(r["async_collapsed"] for r in rows)
    fisher = fisher_more_p(async_collapses, n, sync_collapses, n)
    checks = {
        "a1_async_mean_inside_sync_spread": min(sync) <= async_mean <= max(sync),
        "a2_noninferior": lower > -margin,
        "b_no_excess_collapses": fisher >= LEVEL,
    }
    return {
        "seeds": [r["seed"] for r in rows],
        "sync_mean": sum(sync) / n,
        "sync_min": min(sync),
        "sync_max": max(sync),
        "async_mean": async_mean,
        "diff_mean": sum(diffs) / n,
        "diff_lower_95": lower,
        "margin": margin,
        "sign_flip_p": sign_flip_p(diffs, margin),
        "sync_collapses": sync_collapses,
        "async_collapses": async_collapses,
        "fisher_p": fisher,
        **checks,
        "passes": all(checks.values()),
    }


def markdown_table(rows: list[dict]) -> str:
    """One line per seed: SFT start, synchronous, asynchronous reward, their difference."""

    def cell(reward: float, collapsed: bool, run: dict) -> str:
        if run["stopped"]:
            return f"**stopped** (step {run['steps']}): 0"
        return f"**{reward:.3f}** (collapsed)" if collapsed else f"{reward:.3f}"

    lines = [
        "| seed | after SFT | synchronous | asynchronous | async − sync |",
        "|---|---|---|---|---|",
    ]
    for r in rows:
        sync = cell(r["sync"], r["sync_collapsed"], r["sync_run"])
        asyn = cell(r["async"], r["async_collapsed"], r["async_run"])
        diff = r["async"] - r["sync"]
        lines.append(f"| {r['seed']} | {r['sft']:.3f} | {sync} | {asyn} | {diff:+.3f} |")
    return "\n".join(lines)


def _reward(folder: Path) -> float:
    return float(json.loads((folder / "summary.json").read_text())["gyms"]["guess"]["reward_mean"])


def _run_arm(out: Path, seed: int, recipe: str, name: str, sets: list[str]) -> None:
    """The seed's SFT start (and the demo's synchronous run) if missing, then OUT/NAME/seed_S."""
    from lora_learns import _rl_phases, _sft_start

    from mua.demo import PhaseFailed

    try:
        start = _sft_start(out, seed)
    except PhaseFailed as err:  # the synchronous RL phase stopped (after the SFT evaluation)
        start = out / "sft_start" / f"seed_{seed}"
        (start / "failed.txt").write_text(str(err)[-2000:])
    folder = out / name / f"seed_{seed}"
    if (folder / "eval_rl" / "summary.json").is_file() or (folder / "failed.txt").is_file():
        return
    try:
        _rl_phases(start, folder, seed, recipe, sets)
    except PhaseFailed as err:  # e.g. a collapse: every reward 0 and the run stops
        (folder / "failed.txt").write_text(str(err)[-2000:])


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python scripts/async_learns.py")
    parser.add_argument("--seeds", default="0-2")
    parser.add_argument("--recipe", default="quickstart_async.yaml", help="under recipes/")
    parser.add_argument("--name", default=None, help="folder under OUT (default: recipe stem)")
    parser.add_argument("--set", action="append", default=[], help="RL override key=value")
    parser.add_argument("--out", default="runs/async_learns")
    parser.add_argument(
        "--sync-name", default=None, help="synchronous arm in OUT/NAME (default: the demo's own)"
    )
    parser.add_argument("--sync-recipe", default="quickstart.yaml", help="under recipes/")
    parser.add_argument("--margin", type=float, default=MARGIN)
    parser.add_argument("--markdown", action="store_true", help="also print a table per seed")
    parser.add_argument("--judge-only", action="store_true", help="judge existing runs only")
    args = parser.parse_args(argv)
    os.chdir(REPO)
    out = Path(args.out).resolve()
    name = args.name or Path(args.recipe).stem
    rows = []
    try:
        seeds = parse_seeds(args.seeds)
    except ValueError:
        parser.error(f"--seeds {args.seeds!r}: expected numbers and ranges, e.g. 0-11 or 0,2,5")
    for seed in seeds:
        if not args.judge_only:
            _run_arm(out, seed, args.recipe, name, args.set)
            if args.sync_name:
                _run_arm(out, seed, args.sync_recipe, args.sync_name, args.set)
        start = out / "sft_start" / f"seed_{seed}"
        if not (start / "eval_sft" / "summary.json").is_file():
            print(
                f"seed {seed}: no SFT start in {start}; run without --judge-only", file=sys.stderr
            )
            return 2
        sft = _reward(start / "eval_sft")
        sync = run_outcome(out / args.sync_name / f"seed_{seed}" if args.sync_name else start, sft)
        asyn = run_outcome(out / name / f"seed_{seed}", sft)
        if sync is None or asyn is None:
            which = "synchronous" if sync is None else "asynchronous"
            print(
                f"seed {seed}: the {which} run is missing; run without --judge-only",
                file=sys.stderr,
            )
            return 2
        row = {
            "seed": seed,
            "sft": sft,
            "sync": sync["reward"],
            "async": asyn["reward"],
            "sync_collapsed": sync["collapsed"],
            "async_collapsed": asyn["collapsed"],
            "sync_run": sync,
            "async_run": asyn,
        }
        rows.append(row)
        print(json.dumps({k: row[k] for k in ("seed", "sft", "sync", "async")}), flush=True)
    verdict = judge(rows, margin=args.margin)
    print(json.dumps(verdict), flush=True)
    if args.markdown:
        print(markdown_table(rows))
    (out / name).mkdir(parents=True, exist_ok=True)
    (out / name / "judgement.json").write_text(json.dumps({"rows": rows, **verdict}, indent=2))
    return 0 if verdict["passes"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
