"""Does the CPU quickstart learn with LoRA? Held-out reward after SFT and after RL, per seed.

    python scripts/lora_learns.py --seeds 0,1,2 [--recipe quickstart_lora.yaml]
        [--set optim.lr=3e-3 --set model.lora.rank=64 ...] [--name NAME] [--out runs/lora_learns]

The first setting run for a seed runs the whole demo (`mua.demo`: prep, expert data, SFT, eval,
RL, merge, eval) in OUT/sft_start/seed_S; every setting (NAME, default the recipe's stem) then
runs only the RL phase, the merge and the evaluation in OUT/NAME/seed_S, from that seed's SFT
model, with `--set` overrides added to the RL command. So settings compared on one seed start
from the same SFT model and are evaluated on the same held-out tasks.

Prints one line per seed (reward after SFT, after RL, minutes of the RL phases; a run that stopped,
e.g. collapsed to every reward 0, counts as a gain of 0 and is named) and a summary:
mean gain, spread (max - min), sample standard deviation, and whether it learns by the bar used
in the README: every seed gains and the mean gain exceeds twice the standard deviation of the
gains (and the spread). Writes OUT/NAME/summary.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def _sft_start(out: Path, seed: int) -> Path:
    """The SFT folder (phases 1-4 of the demo) of `seed`, run once and kept."""
    from mua.demo import run_demo

    folder = out / "sft_start" / f"seed_{seed}"
    if not (folder / "eval_sft" / "summary.json").is_file():
        run_demo(folder, seed=seed)
    return folder


def _rl_phases(start: Path, folder: Path, seed: int, recipe: str, sets: list[str]) -> float:
    """RL, merge and evaluation of one setting from the SFT start; minutes taken."""
    from mua.demo import DemoResult, _phases, _run_phase

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "logs").mkdir(exist_ok=True)
    for name in ("data", "sft", "eval_sft", "expert"):
        link = folder / name
        if not link.exists():
            link.symlink_to(start / name)
    env = {
        **os.environ,
        "MLFLOW_TRACKING_URI": f"sqlite:///{folder / 'mlflow.db'}",
        "HF_HUB_OFFLINE": "1",
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
        "MUA_DEMO_SEED": str(seed),
    }
    result = DemoResult(out_dir=folder, seed=seed)
    phases = dict(_phases(folder.resolve(), seed, rl_recipe=recipe))
    phases["rl"] = phases["rl"] + list(sets)
    t0 = time.perf_counter()
    for i, name in enumerate(("rl", "merge", "eval rl"), start=5):
        cmd = phases[name]
        if "{merged}" in cmd:
            from mua.demo import _latest_merged

            cmd = [str(_latest_merged(folder.resolve())) if a == "{merged}" else a for a in cmd]
        _run_phase(i, 7, name, cmd, folder, env, result)
    return (time.perf_counter() - t0) / 60.0


def _reward(folder: Path) -> float:
    summary = json.loads((folder / "summary.json").read_text())
    return float(summary["gyms"]["guess"]["reward_mean"])


def main(argv: list[str]) -> int:
    from mua.demo import PhaseFailed

    parser = argparse.ArgumentParser(prog="python scripts/lora_learns.py")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--recipe", default="quickstart_lora.yaml", help="under recipes/")
    parser.add_argument("--set", action="append", default=[], help="RL override key=value")
    parser.add_argument("--name", default=None)
    parser.add_argument("--out", default="runs/lora_learns")
    args = parser.parse_args(argv)
    os.chdir(REPO)
    out = Path(args.out).resolve()
    name = args.name or Path(args.recipe).stem
    rows = []
    for seed in [int(s) for s in args.seeds.split(",") if s.strip()]:
        start = _sft_start(out, seed)
        folder = out / name / f"seed_{seed}"
        minutes, failed = float("nan"), None
        if not (folder / "eval_rl" / "summary.json").is_file():
            try:
                minutes = _rl_phases(start, folder, seed, args.recipe, args.set)
            except PhaseFailed as err:  # e.g. a collapse: every reward 0, the run stops
                failed = str(err).splitlines()[-1][:300]
        sft = _reward(start / "eval_sft")
        row = {
            "seed": seed,
            "sft": sft,
            # a run that stopped counts as no gain at all
            "rl": sft if failed else _reward(folder / "eval_rl"),
            "rl_minutes": minutes,
            **({"failed": failed} if failed else {}),
        }
        rows.append(row)
        print(json.dumps(row), flush=True)
    gains = [r["rl"] - r["sft"] for r in rows]
    mean = statistics.mean(gains)
    std = statistics.stdev(gains) if len(gains) > 1 else 0.0
    spread = max(gains) - min(gains)
    summary = {
        "name": name,
        "recipe": args.recipe,
        "overrides": args.set,
        "gains": gains,
        "gain_mean": mean,
        "gain_std": std,
        "gain_spread": spread,
        "failed_seeds": [r["seed"] for r in rows if "failed" in r],
        "learns": all(g > 0 for g in gains) and mean > 2 * std and mean > spread,
    }
    print(json.dumps(summary), flush=True)
    (out / name).mkdir(parents=True, exist_ok=True)
    (out / name / "summary.json").write_text(json.dumps({"seeds": rows, **summary}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
