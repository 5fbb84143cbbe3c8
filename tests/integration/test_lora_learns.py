"""The learning bar of `recipes/quickstart_lora.yaml` (slow: about 20 minutes on 2 quiet CPU cores).

`scripts/lora_learns.py` runs the CPU quickstart over seeds 0, 1 and 2 with the LoRA recipe as
its GRPO phase; the bar (the README's, section LoRA): every seed raises held-out reward over its
SFT start, and the mean gain exceeds twice the standard deviation of the gains and their spread.
Gains are compared with each other on this machine, never with stored numbers.
Not met yet: over seeds 0-5 every seed gains, but the mean gain is about the spread of the gains,
and seed 6 gains nothing (README, section LoRA), so three seeds pass or fail by chance. The test is an expected failure
that may pass (not strict); it becomes a plain test once a recipe meets the bar over seeds 0-5.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.integration.train_helpers import REPO

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.mark.xfail(
    reason="the LoRA quickstart does not meet the learning bar over seeds 0-5 yet", strict=False
)
def test_lora_quickstart_learns_over_three_seeds(tmp_path):
    res = subprocess.run(
        [sys.executable, "scripts/lora_learns.py", "--seeds", "0,1,2", "--out", str(tmp_path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=3600,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    summary = json.loads((tmp_path / "quickstart_lora" / "summary.json").read_text())
    assert all(g > 0 for g in summary["gains"]), summary
    assert summary["gain_mean"] > 2 * summary["gain_std"], summary
    assert summary["gain_mean"] > summary["gain_spread"], summary
