"""Gold replay of every task of a domain, in the shape of tau2-bench's own results.

For each task: the gold environment's database hashes (agent, user) as tau2's evaluator
computes them; the tool-message texts and error flags the gold actions produce when played
as a conversation (sha256 over `json.dumps([text, error])` per call, synced after each); and
tau2's DB check and ENV_ASSERTION results on that conversation's end state. Hashes are cut to
16 hex digits, the form of the reference file `tests/gyms/tau2_reference/reference.json`.

Run `python -m gyms.tau2.replay <data folder> <domain> [reference.json]` to print mismatches.
Works for any registered domain, telecom included once its package exists.
"""

from __future__ import annotations

import hashlib
import json
import sys

from gyms.tau2.domain import AGENT, load_domain
from gyms.tau2.reward import gold_environment, predicted_environment, run_assertions
from gyms.tau2.tasks import read_tasks

SHORT = 16


def _short(value: str | None) -> str | None:
    return None if value is None else value[:SHORT]


def replay_task(domain, task: dict) -> dict:
    gold = gold_environment(domain, task)
    criteria = task.get("evaluation_criteria") or {}
    actions = criteria.get("actions") or []
    scratch = domain.new_environment()
    scratch.apply_initial_state(task.get("initial_state"))
    texts = hashlib.sha256()
    calls = []
    for action in actions:
        call = {
            "requestor": action.get("requestor", AGENT),
            "name": action["name"],
            "arguments": dict(action.get("arguments") or {}),
        }
        content, error = scratch.tool_call(call["requestor"], call["name"], call["arguments"])
        texts.update(json.dumps([content, error]).encode())
        calls.append(call)
    out = {
        "gold": [_short(gold.db_hash()), _short(gold.user_db_hash())],
        "texts": texts.hexdigest()[:SHORT],
    }
    if criteria.get("actions") is None and criteria.get("env_assertions") is None:
        out.update(db_match=True, assertions=[])
        return out
    predicted = predicted_environment(domain, task, calls)
    out["db_match"] = (predicted.db_hash(), predicted.user_db_hash()) == (
        gold.db_hash(),
        gold.user_db_hash(),
    )
    out["assertions"] = [
        c["met"] for c in run_assertions(predicted, criteria.get("env_assertions") or [])
    ]
    return out


def replay_domain(data_dir, name: str, only: set[str] | None = None) -> dict[str, dict]:
    """Every task's record (or only the tasks whose ids are in `only`)."""
    domain = load_domain(name, data_dir)
    tasks, _ = read_tasks(domain.data_dir, name)
    return {
        str(t["id"]): replay_task(domain, t) for t in tasks if only is None or str(t["id"]) in only
    }


def digest(records: dict[str, dict]) -> str:
    """sha256 of every task's record in task-id order (the reference file's `digests`)."""
    return hashlib.sha256(json.dumps(records, sort_keys=True).encode()).hexdigest()


def mismatches(
    ours: dict[str, dict], reference: dict, name: str, complete: bool = True
) -> list[str]:
    """Differences from the reference file's records and (for a `complete` replay of every task)
    its digest, for domain `name`."""
    records = (
        reference[name] if complete else {t: r for t, r in reference[name].items() if t in ours}
    )
    lines = [f"{tid}: missing from our replay" for tid in records if tid not in ours]
    if complete and digest(ours) != reference["digests"][name]:
        lines.append(f"{name}: digest over all {len(ours)} tasks differs from tau2's")
    for tid, want in records.items():
        got = ours.get(tid)
        if got is None:
            continue
        for key, value in want.items():
            if got.get(key) != value:
                lines.append(f"{tid}: {key} ours={got.get(key)} tau2={value}")
    return lines


if __name__ == "__main__":
    data, name = sys.argv[1], sys.argv[2]
    result = replay_domain(data, name)
    if len(sys.argv) > 3:
        ref = json.loads(open(sys.argv[3], encoding="utf-8").read())
        bad = mismatches(result, ref, name)
        print("\n".join(bad[:50]) or f"{name}: all {len(result)} tasks agree with tau2")
    else:
        print(json.dumps(result, indent=0, sort_keys=True))
