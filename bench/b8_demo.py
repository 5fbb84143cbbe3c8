"""B8: the quickstart learns — `make demo` over seeds: minutes, held-out reward after SFT and after GRPO.

Each seed runs the whole demo (`mua.demo.run_demo`) in runs/bench_b8/seed_S; rewards are the demo's
sampled evaluation (temperature 1, 8 games per held-out task). The gain is
reward_after_rl − reward_after_sft per seed; `reward_gain` is its mean, `reward_gain_spread` the
range (max − min) of the per-seed gains, and `gain_minus_spread` must be positive. `demo_minutes`
is the slowest seed. Seeds: $B8_SEEDS (comma-separated, default 0,1,2).
"""

from __future__ import annotations

import os
import statistics

from bench.common import require_work

ID = "B8"
BAR = {"demo_minutes": "<= 15", "gain_minus_spread": "> 0"}


def run() -> tuple[dict[str, float], str]:
    from mua.demo import run_demo

    seeds = [int(s) for s in os.environ.get("B8_SEEDS", "0,1,2").split(",") if s.strip()]
    results = []
    for seed in seeds:
        print(f"-- seed {seed}", flush=True)
        results.append(run_demo(f"runs/bench_b8/seed_{seed}", seed=seed))
    for r in results:  # both evaluations scored trajectories (an empty one has no reward)
        for phase, summary in (("after SFT", r.before), ("after GRPO", r.after)):
            require_work(
                ID,
                f"seed {r.seed} evaluation {phase}",
                scored=summary.get("num_trajectories", 0) - summary.get("excluded", 0),
            )
    before = [r.before["reward_mean"] for r in results]
    after = [r.after["reward_mean"] for r in results]
    gains = [a - b for a, b in zip(after, before, strict=True)]
    spread = max(gains) - min(gains) if len(gains) > 1 else 0.0
    metrics = {
        "demo_minutes": max(r.minutes for r in results),
        "reward_after_sft": statistics.mean(before),
        "reward_after_rl": statistics.mean(after),
        "reward_gain": statistics.mean(gains),
        "reward_gain_spread": spread,
        "gain_minus_spread": statistics.mean(gains) - spread,
        "seeds": float(len(seeds)),
    }
    per_seed = "; ".join(
        f"seed {r.seed}: {b:.3f} -> {a:.3f} in {r.minutes:.1f} min"
        for r, b, a in zip(results, before, after, strict=True)
    )
    return metrics, per_seed
