"""Every telecom task of tau2-bench v1.0.1, replayed by our code, against tau2's own results.

`tests/golden/tau2_telecom_reference.json.gz` holds what tau2's `TelecomEnvironment` computed
for each of the 2,285 tasks in tasks.json (see its "about" field): DB hashes of both sides
after the initial state, after the evaluator's gold replay (no sync) and after a live replay
(each gold action a synced tool call), a digest of the live replay's tool-message texts, and
each env assertion's result. The data comes from the shared tau2 folder; the test skips when
it is absent.
"""

from __future__ import annotations

import gzip
import hashlib
import json
from pathlib import Path

import pytest

from gyms.tau2.domain import load_domain
from tests.conftest import shared_dir

REFERENCE = Path(__file__).resolve().parents[1] / "golden" / "tau2_telecom_reference.json.gz"


def _h(value: str | None) -> str:
    return (value or "")[:12]


def replay_task(domain, task: dict) -> list[str]:
    """Our outcome for one task, in the reference's field order."""
    initial = task.get("initial_state")
    criteria = task["evaluation_criteria"]
    actions = criteria.get("actions") or []

    gold = domain.new_environment()
    gold.apply_initial_state(initial)
    init = [_h(gold.db_hash()), _h(gold.user_db_hash())]
    gold.replay_gold(actions)

    live = domain.new_environment()
    live.apply_initial_state(initial)
    texts = [content for content, _error in live.replay(actions)]
    results = hashlib.sha256(json.dumps(texts).encode()).hexdigest()
    met = [
        live.run_assertion(
            a["env_type"], a["func_name"], a.get("arguments"), a.get("assert_value", True)
        )
        for a in criteria.get("env_assertions") or []
    ]
    return [
        *init,
        _h(gold.db_hash()),
        _h(gold.user_db_hash()),
        _h(live.db_hash()),
        _h(live.user_db_hash()),
        _h(results),
        "".join("1" if m else "0" for m in met),
    ]


@pytest.fixture(scope="module")
def telecom():
    shared = shared_dir() / "data" / "tau2"
    if not (shared / "tau2" / "domains" / "telecom" / "tasks.json").is_file():
        pytest.skip(f"tau2 telecom data not found under {shared}")
    tasks = json.loads((shared / "tau2" / "domains" / "telecom" / "tasks.json").read_text())
    return load_domain("telecom", shared), tasks


@pytest.fixture(scope="module")
def reference():
    return json.loads(gzip.decompress(REFERENCE.read_bytes()))


def test_every_task_matches_tau2(telecom, reference):
    domain, tasks = telecom
    expected = reference["tasks"]
    assert {t["id"] for t in tasks} == set(expected), "tasks.json is not the one the reference saw"
    fields = reference["fields"]
    mismatches = []
    for task in tasks:
        ours = replay_task(domain, task)
        theirs = expected[task["id"]]
        wrong = [f for f, a, b in zip(fields, ours, theirs) if a != b]
        if wrong:
            mismatches.append(f"{task['id']}: {', '.join(wrong)}")
    assert not mismatches, f"{len(mismatches)} tasks differ from tau2:\n" + "\n".join(
        mismatches[:20]
    )
