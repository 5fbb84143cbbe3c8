"""Regenerate tests/golden/grpo_guess.json: the per-step numbers of the tiny GRPO run on `guess`.

Run it only when a change is meant to alter training numbers (then say why in the commit):

    .venv/bin/python scripts/regen_golden.py

It builds the warm-start model and task files in a temporary folder, runs the golden recipe
(tests/integration/grpo_helpers.py) through `mua train`, and writes the metrics. The test that
checks them (tests/integration/test_train_grpo_golden.py) never writes this file.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.integration.grpo_helpers import (  # noqa: E402
    GOLDEN_FILE,
    GOLDEN_OVERRIDES,
    run_golden,
    warm_model,
    write_guess_tasks,
)


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        train, _ = write_guess_tasks(folder)
        model = warm_model(folder / "warm")
        metrics, res = run_golden(folder, model, train)
        if not metrics:
            print(res.stderr[-3000:], file=sys.stderr)
            return 1
    rewards = metrics["reward/mean"]
    doc = {"description": "tiny GRPO on guess (see tests/integration/grpo_helpers.py); "
                          "regenerate with scripts/regen_golden.py",
           "overrides": GOLDEN_OVERRIDES, "metrics": metrics}
    GOLDEN_FILE.parent.mkdir(parents=True, exist_ok=True)
    GOLDEN_FILE.write_text(json.dumps(doc, indent=1) + "\n")
    first, last = sum(rewards[:5]) / 5, sum(rewards[-5:]) / 5
    print(f"wrote {GOLDEN_FILE}: reward {first:.3f} (steps 1-5) -> {last:.3f} (steps 16-20)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
