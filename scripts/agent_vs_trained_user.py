"""Does an agent trained against a trained user do better against the scripted user? Per seed.

    python scripts/agent_vs_trained_user.py [--seeds 0-2] [--jobs 2]
        [--arms sft,scripted,trained_user,alternating] [--out runs/agent_vs_trained_user]

For each seed S, in OUT/seed_S, with real `mua` commands on the guess gym (numbers 1..8):

1. the two warm starts: the agent's (recipes/quickstart_rollout.yaml, quickstart_sft.yaml) and
   the user's (train_user_quickstart_rollout.yaml, train_user_quickstart_sft.yaml);
2. the trained user (for the arm `trained_user`): GRPO in the user seat from its warm start
   (train_user_quickstart.yaml);
3. the agents of the arms asked for (`--arms`, default all four), from the same agent warm start:
   - `sft`: the warm start itself;
   - `scripted`: 50 GRPO steps of recipes/quickstart.yaml against the scripted user (the
     quickstart as it ships);
   - `trained_user`: the same against the trained user of step 2, served as guess's LLM user
     (`user: {kind: llm, checkpoint: ...}`, `gym.options.llm_user: true`);
   - `alternating`: recipes/train_agent_and_user.yaml from both warm starts (5 rounds of 10
     steps each side), its agent's last export;
4. `mua eval recipes/quickstart_eval.yaml` of each arm's agent: held-out games against the
   scripted user (8 per task, temperature 1), the mean reward (a game won is 1).

Every training takes S as `model.seed` and `data.seed`. Prints one line per seed and writes
OUT/results.json (rows and, per column, mean and sample standard deviation). It judges nothing.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
RECIPES = REPO / "recipes"
USER = "runs/train_user_quickstart/hf/final"


def mua(folder: Path, *args: str) -> None:
    from tests.integration.train_helpers import run_mua_in

    run_mua_in(folder, *args, timeout_s=7200)


def against_scripted_user(folder: Path, model: str, out: str) -> float:
    recipe = RECIPES / "quickstart_eval.yaml"
    mua(folder, "eval", str(recipe), f"model.path={model}", "--out", out, "--fresh")
    summary = json.loads((folder / out / "summary.json").read_text())
    (row,) = summary["gyms"].values()
    return float(row["reward_mean"])


ARMS = ("sft", "scripted", "trained_user", "alternating")


def train_arm(folder: Path, arm: str, seeds: list[str]) -> str:
    """Train the agent of `arm` in `folder`; the folder of its HF export."""
    quickstart = str(RECIPES / "quickstart.yaml")
    if arm == "sft":
        return "runs/quickstart_sft/hf/final"
    if arm == "scripted":
        mua(folder, "train", quickstart, *seeds, "run_dir=runs/agent_scripted")
        return "runs/agent_scripted/hf/final"
    if arm == "trained_user":
        mua(folder, "train", str(RECIPES / "train_user_quickstart.yaml"), *seeds)
        user = json.dumps({"kind": "llm", "checkpoint": USER})
        mua(
            folder,
            "train",
            quickstart,
            *seeds,
            "run_dir=runs/agent_trained_user",
            f"user={user}",
            "gym.options.llm_user=true",
        )
        return "runs/agent_trained_user/hf/final"
    mua(
        folder,
        "train",
        str(RECIPES / "train_agent_and_user.yaml"),
        f"alternate.agent.recipe={RECIPES / 'quickstart.yaml'}",
        f"alternate.user.recipe={RECIPES / 'train_user_quickstart.yaml'}",
        f"alternate.agent.overrides=[gym.options.llm_user=true, {', '.join(seeds)}]",
        f"alternate.user.overrides=[{', '.join(seeds)}]",
    )
    return "runs/train_agent_and_user/agent/hf/round_5"


def run_seed(folder: Path, seed: int, arms: list[str]) -> dict:
    folder.mkdir(parents=True, exist_ok=True)
    seeds = [f"model.seed={seed}", f"data.seed={seed}"]
    mua(folder, "prep", "--gym", "guess", "--option", "max_number=8", "--out", "data/guess")
    for prefix in ("quickstart", "train_user_quickstart"):
        mua(folder, "rollout", str(RECIPES / f"{prefix}_rollout.yaml"))
        mua(folder, "train", str(RECIPES / f"{prefix}_sft.yaml"), *seeds)
    row: dict = {"seed": seed}
    for arm in arms:
        export = train_arm(folder, arm, seeds)
        row[arm] = against_scripted_user(folder, export, f"runs/eval_{arm}")
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", default="0-2")
    parser.add_argument("--jobs", type=int, default=1, help="Seeds run side by side.")
    parser.add_argument(
        "--arms", default=",".join(ARMS), help="Comma-separated, of " + ", ".join(ARMS)
    )
    parser.add_argument("--out", default="runs/agent_vs_trained_user")
    args = parser.parse_args()
    from scripts.user_seat_learns import seed_list

    out = Path(args.out).resolve()
    seeds = seed_list(args.seeds)
    arms = [a.strip() for a in args.arms.split(",") if a.strip()]
    unknown = [a for a in arms if a not in ARMS]
    if unknown or not arms:
        parser.error(f"--arms: unknown {unknown}; choose from {', '.join(ARMS)}")
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        rows = list(pool.map(lambda s: run_seed(out / f"seed_{s}", s, arms), seeds))
    columns = [k for k in rows[0] if k != "seed"]
    for row in rows:
        print(f"seed {row['seed']}: " + ", ".join(f"{k} {row[k]:.3f}" for k in columns))
    summary = {
        k: {
            "mean": statistics.mean(r[k] for r in rows),
            "std": statistics.stdev(r[k] for r in rows) if len(rows) > 1 else 0.0,
        }
        for k in columns
    }
    for k, s in summary.items():
        print(f"{k}: mean {s['mean']:.3f} std {s['std']:.3f}")
    (out / "results.json").write_text(json.dumps({"rows": rows, "summary": summary}, indent=2))


if __name__ == "__main__":
    main()
