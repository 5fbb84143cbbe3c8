"""Simulator audit (`mua eval --audit-users`): how faithfully each simulated user kept to its task.

Up to `eval.audit_samples` scored conversations per gym × user cell (seeded by `data.seed`) have
every user turn after the agent's first message checked by `mua.users.rules`; a user's fidelity is
the share of its checked turns that broke no rule, written with the worst examples to
`user_audit.json` (docs/user_population.md, "Simulator audit").
Not here: an LLM judge of the user's turns, any change to the scores.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from mua.users.matrix import split_cell
from mua.users.rules import agent_text, user_findings, user_turns

AUDIT_FILE = "user_audit.json"
WORST_PER_USER = 3
EXCERPT_CHARS = 300


def _sample(rows: list[dict], k: int, seed: int, cell: str) -> list[dict]:
    scored = [r for r in rows if not r.get("excluded")]
    if len(scored) <= k:
        return scored
    return random.Random(f"{seed}/{cell}").sample(scored, k)


def _example(cell: str, row: dict, findings) -> dict:
    messages = row.get("messages") or []
    first = findings[0]
    before = next(
        (agent_text(m) for m in reversed(messages[: first.turn]) if m.get("role") == "assistant"),
        "",
    )
    return {
        "cell": cell,
        "task_id": row["task_id"],
        "sample_index": row["sample_index"],
        "flagged_turns": len({f.turn for f in findings}),
        "rules": sorted({f.rule for f in findings}),
        "why": first.why,
        "agent": before[:EXCERPT_CHARS],
        "user": str(messages[first.turn].get("content") or "")[:EXCERPT_CHARS],
    }


def audit_users(
    rows_by_cell: dict[str, list[dict]], payloads: dict, samples: int, seed: int
) -> dict:
    """{"users": {user: {fidelity, turns, flagged, conversations, rules}}, "ranking": [users,
    most faithful first], "worst": {user: [examples]}}; `payloads` by (gym label, task id)."""
    users: dict[str, dict] = {}
    examples: dict[str, list[dict]] = {}
    for cell, rows in rows_by_cell.items():
        gym, user = split_cell(cell)
        user = user or "(recipe user)"
        stats = users.setdefault(user, {"turns": 0, "flagged": 0, "conversations": 0, "rules": {}})
        for row in _sample(rows, samples, seed, cell):
            payload = payloads.get((gym, str(row["task_id"])), {})
            findings = user_findings(row, payload)
            stats["conversations"] += 1
            stats["turns"] += len(user_turns(row.get("messages") or []))
            stats["flagged"] += len({f.turn for f in findings})
            for f in findings:
                stats["rules"][f.rule] = stats["rules"].get(f.rule, 0) + 1
            if findings:
                examples.setdefault(user, []).append(_example(cell, row, findings))
    for stats in users.values():
        turns = stats["turns"]
        stats["fidelity"] = 1.0 - stats["flagged"] / turns if turns else None
    ranking = sorted(
        users, key=lambda u: -(users[u]["fidelity"] if users[u]["fidelity"] is not None else -1)
    )
    worst = {
        u: sorted(ex, key=lambda e: (-e["flagged_turns"], e["cell"], str(e["task_id"])))[
            :WORST_PER_USER
        ]
        for u, ex in examples.items()
    }
    return {"users": users, "ranking": ranking, "worst": worst, "samples_per_cell": samples}


def write_audit(out_dir: Path, audit: dict) -> Path:
    path = Path(out_dir) / AUDIT_FILE
    path.write_text(json.dumps(audit, indent=2, sort_keys=True, ensure_ascii=False) + "\n")
    return path


def read_audit(out_dir: Path) -> dict | None:
    try:
        return json.loads((Path(out_dir) / AUDIT_FILE).read_text())
    except (OSError, ValueError):
        return None
