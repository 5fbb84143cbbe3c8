"""The multi-gym CPU quickstart learns on several gyms at once, judged against the seed spread.

Each seed runs the documented pipeline with real `mua` commands in its own folder (relative
paths as in the recipes; the seeds side by side): prep (guess 1..8, intention, math) -> expert rollout -> SFT -> eval of
the SFT model -> GRPO on the three gyms -> eval of the GRPO model. The per-gym gain of a seed is
its held-out reward after GRPO minus after SFT (same eval recipe, same tasks, sampled).

Criterion (documented in docs/multi_gym.md): a gym *learns* when the mean gain over the seeds
exceeds the sample standard deviation of the gain across seeds (mean > std > 0 would be a
one-sigma rise; a gym whose gain is all noise has mean ~ 0 and fails). The test asserts that at
least two gyms learn. Nothing is compared against numbers stored from another machine.

Does not check the per-gym metrics or resume (tests/integration/test_train_multi_gym.py does).
"""

from __future__ import annotations

import json
import statistics
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.integration.train_helpers import run_mua_in

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
RECIPES = REPO / "recipes"
SEEDS = (0, 1, 2)
PREP = [
    ["--gym", "guess", "--option", "max_number=8", "--out", "data/guess"],
    ["--gym", "intention", "--out", "data/intention"],
    ["--gym", "math", "--option", "num_train=200", "--option", "num_test=24", "--out", "data/math"],
]


def _rewards(folder: Path, model: str, out: str) -> dict[str, float]:
    run_mua_in(
        folder,
        "eval",
        str(RECIPES / "multi_gym_quickstart_eval.yaml"),
        f"model.path={model}",
        "--out",
        out,
        "--fresh",
        "--no-mlflow",
    )
    summary = json.loads((folder / out / "summary.json").read_text())
    return {gym: row["reward_mean"] for gym, row in summary["gyms"].items()}


def run_seed(
    folder: Path, seed: int, sft_extra: tuple = (), rl_extra: tuple = ()
) -> tuple[dict[str, float], dict[str, float]]:
    """Held-out reward per gym after SFT and after GRPO for one seed (the whole pipeline);
    `sft_extra` / `rl_extra` are key=value overrides of the two training runs."""
    folder.mkdir(parents=True, exist_ok=True)
    for args in PREP:
        run_mua_in(folder, "prep", *args)
    run_mua_in(folder, "rollout", str(RECIPES / "multi_gym_quickstart_rollout.yaml"))
    seeds = [f"model.seed={seed}", f"data.seed={seed}"]
    run_mua_in(
        folder,
        "train",
        str(RECIPES / "multi_gym_quickstart_sft.yaml"),
        *seeds,
        *sft_extra,
        "--no-resume",
    )
    before = _rewards(folder, "runs/multi_gym_quickstart_sft/hf/final", "runs/eval_sft")
    rl = str(RECIPES / "multi_gym_quickstart.yaml")
    run_mua_in(folder, "train", rl, *seeds, *rl_extra, "--no-resume")
    after = _rewards(folder, "runs/multi_gym_quickstart/hf/final", "runs/eval_rl")
    return before, after


def learning_gyms(gains: dict[str, list[float]]) -> list[str]:
    """Gyms whose mean gain over the seeds exceeds the gain's sample std across seeds (and 0)."""
    out = []
    for gym, values in gains.items():
        mean, spread = statistics.mean(values), statistics.stdev(values)
        if mean > 0 and mean > spread:
            out.append(gym)
    return out


def test_learning_criterion_rejects_noise():
    """The criterion itself: a gain that flips sign across seeds or is flat is not learning."""
    gains = {"up": [0.10, 0.08, 0.12], "noise": [0.2, -0.15, 0.01], "flat": [0.0, 0.0, 0.0]}
    assert learning_gyms(gains) == ["up"]


@pytest.mark.slow
@pytest.mark.timeout(5400)
def test_multi_gym_quickstart_learns_on_two_gyms(tmp_path):
    # the seeds' pipelines run side by side (each `mua` process single-threaded); no mid-run
    # validation: the held-out scores come from `mua eval` before and after
    with ThreadPoolExecutor(max_workers=len(SEEDS)) as pool:
        runs = list(
            pool.map(
                lambda seed: run_seed(
                    tmp_path / f"seed{seed}", seed, rl_extra=("eval.test_freq=0",)
                ),
                SEEDS,
            )
        )
    gains: dict[str, list[float]] = {}
    lines = []
    for seed, (before, after) in zip(SEEDS, runs):
        for gym in before:
            gains.setdefault(gym, []).append(after[gym] - before[gym])
        lines.append(
            f"seed {seed}: "
            + ", ".join(f"{g} {before[g]:.3f} -> {after[g]:.3f}" for g in sorted(before))
        )
    report = "\n".join(lines)
    learned = learning_gyms(gains)
    assert len(learned) >= 2, f"learned on {learned or 'no gym'} only:\n{report}"
