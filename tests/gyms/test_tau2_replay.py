"""tau2 gold replay against tau2-bench's own results, for every task of every domain present.

`tests/gyms/tau2_reference/reference.json` was computed with tau2-bench v1.0.1's environment
and evaluator (see make_reference.py there): gold database hashes (both sides), the texts of
the tool messages the gold actions produce, the DB check and each ENV_ASSERTION result. Our
replay must agree on every task: per-task records where the file keeps them, and a digest
over all tasks of tasks.json (telecom's 2,285 included) otherwise.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from gyms.tau2.replay import mismatches, replay_domain

REFERENCE = json.loads(
    (Path(__file__).parent / "tau2_reference" / "reference.json").read_text(encoding="utf-8")
)


@pytest.fixture
def tau2_dir(shared_data):
    data = shared_data / "tau2"
    if not (data / "tau2" / "domains").is_dir():
        pytest.skip(f"{data} not found")
    return data


EVERY = 24  # `make test` replays every 24th task that has its own record; `make test-all` all


@pytest.mark.slow
@pytest.mark.parametrize("domain", ["retail", "airline", "telecom"])
def test_gold_replay_matches_tau2_on_every_task(tau2_dir, domain):
    if domain == "telecom" and importlib.util.find_spec("gyms.tau2.telecom") is None:
        pytest.skip("the telecom domain package (gyms.tau2.telecom) is not in this checkout")
    ours = replay_domain(tau2_dir, domain)
    assert mismatches(ours, REFERENCE, domain) == []


@pytest.mark.parametrize("domain", ["retail", "airline", "telecom"])
def test_gold_replay_matches_tau2_on_a_sample_of_tasks(tau2_dir, domain):
    """The same check on a fixed sample (every 24th task with a record of its own), for the
    quick suite; telecom's every task is also checked by test_tau2_telecom_replay.py."""
    sample = set(sorted(REFERENCE[domain])[::EVERY])
    ours = replay_domain(tau2_dir, domain, only=sample)
    assert len(ours) == len(sample) > 0
    assert mismatches(ours, REFERENCE, domain, complete=False) == []


def test_mismatches_reports_a_changed_hash_and_the_digest():
    records = dict(REFERENCE["airline"])
    tid = sorted(records)[0]
    records[tid] = {**records[tid], "gold": ["0" * 16, None]}
    bad = mismatches(records, REFERENCE, "airline")
    assert any(line.startswith(f"{tid}: gold") for line in bad)
    assert any("digest" in line for line in bad)
    assert mismatches(dict(REFERENCE["airline"]), REFERENCE, "airline") == []
