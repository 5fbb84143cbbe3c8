"""Does a user trained in the user seat beat its SFT start on held-out tasks? Per gym, per seed.

    python scripts/user_seat_learns.py [--gyms quickstart,telepathy,travel] [--seeds 0-2]
        [--out runs/user_seat_learns]

For each recipe family (`quickstart`: the guess gym, recipes/train_user_quickstart*.yaml;
`telepathy`: recipes/train_user_telepathy*.yaml; `travel`: recipes/train_user_travel*.yaml) and
seed S it runs, with real `mua` commands in
OUT/<family>/seed_S: prep, the scripted user's rollout (the SFT data), the SFT warm start, the
held-out eval of the SFT model, GRPO in the user seat from it, and the held-out eval of the
GRPO model (the same eval recipe, tasks and sampling). Both trainings take the seed as
`model.seed` and `data.seed`. Prints one line per seed (fidelity before, after, gain) and the
mean and sample standard deviation, and writes OUT/<family>/results.json. It judges nothing.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
RECIPES = REPO / "recipes"
PREP = {
    "quickstart": ["--gym", "guess", "--option", "max_number=8", "--out", "data/guess"],
    "telepathy": ["--gym", "telepathy", "--out", "data/telepathy"],
    "travel": ["--gym", "travel", "--out", "data/travel"],
}


def mua(folder: Path, *args: str) -> None:
    """`mua ARGS` run from `folder` (the learning tests' runner: it fails with the output's tail)."""
    from tests.integration.train_helpers import run_mua_in

    run_mua_in(folder, *args)


def held_out(folder: Path, family: str, model: str, out: str) -> float:
    recipe = RECIPES / f"train_user_{family}_eval.yaml"
    mua(folder, "eval", str(recipe), f"model.path={model}", "--out", out, "--fresh")
    summary = json.loads((folder / out / "summary.json").read_text())
    (row,) = summary["gyms"].values()
    return float(row["reward_mean"])


def run_seed(folder: Path, family: str, seed: int) -> tuple[float, float]:
    folder.mkdir(parents=True, exist_ok=True)
    mua(folder, "prep", *PREP[family])
    mua(folder, "rollout", str(RECIPES / f"train_user_{family}_rollout.yaml"))
    seeds = [f"model.seed={seed}", f"data.seed={seed}"]
    mua(folder, "train", str(RECIPES / f"train_user_{family}_sft.yaml"), *seeds, "--no-resume")
    before = held_out(folder, family, f"runs/train_user_{family}_sft/hf/final", "runs/eval_sft")
    mua(folder, "train", str(RECIPES / f"train_user_{family}.yaml"), *seeds, "--no-resume")
    after = held_out(folder, family, f"runs/train_user_{family}/hf/final", "runs/eval_rl")
    return before, after


def seed_list(text: str) -> list[int]:
    if "-" in text:
        low, high = text.split("-", 1)
        return list(range(int(low), int(high) + 1))
    return [int(s) for s in text.split(",")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--gyms", default="quickstart,telepathy,travel")
    parser.add_argument("--seeds", default="0-2")
    parser.add_argument("--out", default="runs/user_seat_learns")
    args = parser.parse_args()
    for family in args.gyms.split(","):
        if family not in PREP:
            sys.exit(f"--gyms: unknown family {family!r}; use {', '.join(PREP)}")
        rows = []
        for seed in seed_list(args.seeds):
            before, after = run_seat_folder(Path(args.out).resolve(), family, seed)
            rows.append({"seed": seed, "sft": before, "grpo": after, "gain": after - before})
            print(
                f"{family} seed {seed}: SFT {before:.3f} -> GRPO {after:.3f} ({after - before:+.3f})"
            )
        summary = {
            key: {
                "mean": statistics.mean(r[key] for r in rows),
                "std": statistics.stdev(r[key] for r in rows) if len(rows) > 1 else 0.0,
            }
            for key in ("sft", "grpo", "gain")
        }
        for key, s in summary.items():
            print(f"{family} {key}: mean {s['mean']:.3f} std {s['std']:.3f}")
        out = Path(args.out) / family / "results.json"
        out.write_text(json.dumps({"seeds": rows, "summary": summary}, indent=2) + "\n")


def run_seat_folder(out: Path, family: str, seed: int) -> tuple[float, float]:
    return run_seed(out / family / f"seed_{seed}", family, seed)


if __name__ == "__main__":
    main()
