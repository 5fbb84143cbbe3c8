"""Does the CPU quickstart learn with a tiny mixture of experts? Seeds, one run each.

    python scripts/moe_learns.py --seeds 0-4 [--out runs/moe_learns] [--set algo.routing_replay=r3]

Per seed S, from the checkout: the quickstart's SFT (`recipes/quickstart_sft.yaml`) on
`tiny:qwen3moe-2m` built from seed S, then its 50 GRPO steps (`recipes/quickstart.yaml`, data
seed S) from that model, in OUT/seed_S; the expert's SFT data and the tasks are made once
(`mua prep`, `mua rollout`) in OUT. Each `mua` command runs under `flock /tmp/mua-cpu.lock`
when `flock` exists (heavy runs take turns on a shared machine).

The criterion is the GRPO learning test's (tests/integration/test_train_grpo_learns.py): the rise
of a run is the mean training reward of its last five steps minus that of its first five; most
seeds (all but one) rise and the mean rise is more than two standard errors above zero. Prints a
line per seed and the verdict, writes OUT/judgement.json, exits 0 when the criterion holds.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MODEL = "tiny:qwen3moe-2m"


def mua(*args: str) -> None:
    lock = ["flock", "/tmp/mua-cpu.lock"] if shutil.which("flock") else []
    cmd = [*lock, sys.executable, "-m", "mua.cli.main", *args]
    res = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    if res.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed:\n{res.stdout[-2000:]}\n{res.stderr[-2000:]}")


def rewards(run_dir: Path) -> list[float]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [r["reward/mean"] for r in rows if "reward/mean" in r]


def one_seed(out: Path, seed: int, extra: list[str]) -> float:
    folder = out / f"seed_{seed}"
    sft, rl = folder / "sft", folder / "grpo"
    if not (sft / "hf" / "final" / "config.json").is_file():
        mua("train", "recipes/quickstart_sft.yaml", f"model.path={MODEL}", f"model.seed={seed}",
            f"data.train_files=[{out / 'sft_data' / 'trajectories.jsonl'}]", f"run_dir={sft}")  # fmt: skip
    if not (rl / "hf" / "final" / "config.json").is_file():
        data = out / "data"
        mua("train", "recipes/quickstart.yaml", f"model.path={sft / 'hf' / 'final'}",
            f"data.seed={seed}", f"data.train_files=[{data / 'train.parquet'}]",
            f"data.test_files=[{data / 'test.parquet'}]", f"run_dir={rl}", *extra)  # fmt: skip
    history = rewards(rl)
    return sum(history[-5:]) / 5 - sum(history[:5]) / 5


def parse_seeds(text: str) -> list[int]:
    if "-" in text:
        lo, hi = (int(x) for x in text.split("-"))
        return list(range(lo, hi + 1))
    return [int(x) for x in text.split(",")]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default="0-4")
    ap.add_argument("--out", default="runs/moe_learns")
    ap.add_argument("--set", action="append", default=[], help="override for the GRPO runs")
    args = ap.parse_args()
    out = (REPO / args.out).resolve()
    data = out / "data"
    if not (data / "train.parquet").is_file():
        mua("prep", "--gym", "guess", "--option", "max_number=8", "--out", str(data))
    if not (out / "sft_data" / "trajectories.jsonl").is_file():
        mua("rollout", "recipes/quickstart_rollout.yaml", f"data.train_files=[{data / 'train.parquet'}]",
            f"run_dir={out / 'sft_data'}")  # fmt: skip
    rises = {}
    for seed in parse_seeds(args.seeds):
        rises[seed] = one_seed(out, seed, args.set)
        print(f"seed {seed}: rise {rises[seed]:+.3f}", flush=True)
    values = list(rises.values())
    mean = statistics.mean(values)
    se = statistics.stdev(values) / len(values) ** 0.5 if len(values) > 1 else float("inf")
    holds = sum(r > 0 for r in values) >= len(values) - 1 and mean > 2 * se
    verdict = {"rises": rises, "mean": mean, "standard_error": se, "holds": holds}
    (out / "judgement.json").write_text(json.dumps(verdict, indent=2))
    print(
        f"mean rise {mean:+.3f} (standard error {se:.3f}): criterion {'holds' if holds else 'fails'}"
    )
    return 0 if holds else 1


if __name__ == "__main__":
    raise SystemExit(main())
