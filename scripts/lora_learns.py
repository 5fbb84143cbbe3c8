"""Does the CPU quickstart learn with LoRA? `python scripts/lora_learns.py [SEEDS] [RECIPE] [OUT]`.

Runs the whole demo (`mua.demo.run_demo`: prep, expert data, SFT, eval, RL, merge, eval) once per
seed with the RL phase's recipe replaced (default recipes/quickstart_lora.yaml), and prints per
seed the held-out reward after SFT and after RL, then the mean gain and the spread (max - min) of
the per-seed gains. It learns when the mean gain exceeds that spread. Writes under OUT
(default runs/lora_learns/<recipe stem>/seed_S).
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    from mua.demo import run_demo

    seeds = [int(s) for s in (argv[0] if argv else "0,1,2").split(",") if s.strip()]
    recipe = argv[1] if len(argv) > 1 else "quickstart_lora.yaml"
    out = Path(argv[2] if len(argv) > 2 else "runs/lora_learns") / Path(recipe).stem
    rows = []
    for seed in seeds:
        result = run_demo(out / f"seed_{seed}", seed=seed, rl_recipe=recipe)
        before, after = result.before["reward_mean"], result.after["reward_mean"]
        rows.append({"seed": seed, "sft": before, "rl": after, "minutes": result.minutes})
        print(json.dumps(rows[-1]), flush=True)
    gains = [r["rl"] - r["sft"] for r in rows]
    spread = max(gains) - min(gains) if len(gains) > 1 else 0.0
    summary = {"recipe": recipe, "gain_mean": statistics.mean(gains), "gain_spread": spread}
    print(json.dumps(summary), flush=True)
    (out / "summary.json").write_text(json.dumps({"seeds": rows, **summary}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
