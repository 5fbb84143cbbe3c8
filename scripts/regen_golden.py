"""Regenerate tests/golden/grpo_guess.json: the per-step numbers of the tiny GRPO run on `guess`.

Run it only when a change is meant to alter training numbers (then say why in the commit):

    .venv/bin/python scripts/regen_golden.py

It builds the warm-start model and task files in a temporary folder, runs the golden recipe
(tests/integration/grpo_helpers.py) through `mua train` in deterministic mode
(`MUA_DETERMINISTIC=1`, see mua/determinism.py), and writes the metrics. The test that checks
them (tests/integration/test_train_grpo_golden.py) never writes this file.

    .venv/bin/python scripts/regen_golden.py --spread

writes nothing: it runs the golden recipe once per setting in SPREAD_SETTINGS (what differs
between machines and shells: thread counts, the vector instructions MKL may use) and prints each
metric's largest difference from the first run, the spread the test's tolerances must cover.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.integration.grpo_helpers import (  # noqa: E402
    GOLDEN_FILE,
    GOLDEN_KEYS,
    GOLDEN_OVERRIDES,
    golden_setup,
    run_golden,
)

# Extra environment of each --spread run (deterministic mode is on in all of them).
SPREAD_SETTINGS = {
    "as is": {},
    "OMP_NUM_THREADS=2": {"OMP_NUM_THREADS": "2", "MKL_NUM_THREADS": "2"},
    "MKL limited to AVX2": {"MKL_ENABLE_INSTRUCTIONS": "AVX2"},
    "MKL limited to AVX": {"MKL_ENABLE_INSTRUCTIONS": "AVX"},
}


class _Factory:
    """The one method of pytest's tmp_path_factory that golden_setup uses."""

    def __init__(self, base: Path):
        self.base = base

    def getbasetemp(self) -> Path:
        return self.base


def _run(folder: Path, env_extra: dict) -> dict[str, list[float]]:
    model, train = golden_setup(_Factory(folder), env_extra)
    run_folder = folder / f"run-{len(list(folder.glob('run-*')))}"
    run_folder.mkdir()
    metrics, res = run_golden(run_folder, model, train, env_extra=env_extra)
    if not metrics:
        print(res.stderr[-3000:], file=sys.stderr)
        raise SystemExit(1)
    return metrics


def regenerate() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        metrics = _run(Path(tmp), {})
    rewards = metrics["reward/mean"]
    doc = {
        "description": "tiny GRPO on guess in deterministic mode (see "
        "tests/integration/grpo_helpers.py); regenerate with scripts/regen_golden.py",
        "overrides": GOLDEN_OVERRIDES,
        "metrics": metrics,
    }
    GOLDEN_FILE.parent.mkdir(parents=True, exist_ok=True)
    GOLDEN_FILE.write_text(json.dumps(doc, indent=1) + "\n")
    first, last = sum(rewards[:5]) / 5, sum(rewards[-5:]) / 5
    print(f"wrote {GOLDEN_FILE}: reward {first:.3f} (steps 1-5) -> {last:.3f} (steps 16-20)")
    return 0


def spread() -> int:
    runs = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, env in SPREAD_SETTINGS.items():
            # Each setting builds its warm start anew, under that setting.
            folder = Path(tmp) / f"setting-{len(runs)}"
            folder.mkdir()
            runs[name] = _run(folder, env)
            print(f"ran: {name}", flush=True)
    base_name, base = next(iter(runs.items()))
    for name, metrics in runs.items():
        diffs = {
            key: max(abs(a - b) for a, b in zip(metrics[key], base[key], strict=True))
            for key in GOLDEN_KEYS
        }
        shown = ", ".join(f"{key} {value:.3g}" for key, value in diffs.items())
        print(f"{name} vs {base_name}: largest difference {shown}")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spread", action="store_true", help="measure, write nothing")
    args = parser.parse_args()
    return spread() if args.spread else regenerate()


if __name__ == "__main__":
    sys.exit(main())
