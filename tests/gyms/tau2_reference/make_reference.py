"""Regenerate `reference.json` with tau2-bench's own code (not used by the tests themselves).

Usage (tau2-bench's `src/` importable, its data folder in TAU2_DATA_DIR):

    TAU2_DATA_DIR=<data> PYTHONPATH=<tau2-bench>/src python make_reference.py [domain ...]

For every task it records, as computed by tau2's environment and evaluator:
  - `gold`: hashes (agent DB, user DB) after tau2's gold replay (initial state, then the
    task's actions in list order through `make_tool_call`, failures ignored);
  - `texts`: sha256 of the tool-message texts and error flags those actions produce when
    run as a trajectory (through `get_response`, synced after each call);
  - `db_match` and `assertions`: the DB check and each ENV_ASSERTION result of tau2's
    `EnvironmentEvaluator` on that trajectory.
Hashes are shortened to 16 hex digits. Per-task records are kept for every retail and
airline task and for telecom's `base` split; `digests` holds, per domain, the sha256 of all
its tasks' records (`digest()`), so the check still covers every task of tasks.json.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

from tau2.data_model.message import AssistantMessage, ToolCall, UserMessage
from tau2.evaluator.evaluator_env import EnvironmentEvaluator

SHORT = 16


def _constructors():
    from tau2.domains.airline import environment as airline
    from tau2.domains.retail import environment as retail
    from tau2.domains.telecom import environment as telecom

    return {
        "retail": (retail.get_environment, lambda: retail.get_tasks(None)),
        "airline": (airline.get_environment, lambda: airline.get_tasks(None)),
        "telecom": (telecom.get_environment, lambda: telecom.get_tasks(None)),
    }


def _short(value):
    return None if value is None else value[:SHORT]


def _initial(task):
    state = task.initial_state
    if state is None:
        return None, None, []
    return state.initialization_data, state.initialization_actions, state.message_history or []


def reference_for(make_env, task) -> dict:
    data, actions, history = _initial(task)
    gold = make_env()
    gold.set_state(data, actions, history)
    for action in task.evaluation_criteria.actions or []:
        try:
            gold.make_tool_call(action.name, requestor=action.requestor, **action.arguments)
        except Exception:  # noqa: BLE001 - tau2 logs and ignores failing gold actions
            pass
    scratch = make_env()
    scratch.set_state(data, actions, history)
    trajectory = list(history)
    texts = hashlib.sha256()
    for i, action in enumerate(task.evaluation_criteria.actions or []):
        call = ToolCall(
            id=f"call_{i}", name=action.name, arguments=action.arguments, requestor=action.requestor
        )
        kind = UserMessage if action.requestor == "user" else AssistantMessage
        trajectory.append(kind(role=action.requestor, content=None, tool_calls=[call]))
        reply = scratch.get_response(call)
        texts.update(json.dumps([reply.content, reply.error]).encode())
        trajectory.append(reply)
    info = EnvironmentEvaluator.calculate_reward(make_env, task, trajectory)
    return {
        "gold": [_short(gold.get_db_hash()), _short(gold.get_user_db_hash())],
        "texts": texts.hexdigest()[:SHORT],
        "db_match": bool(info.db_check.db_match) if info.db_check else None,
        "assertions": [bool(c.met) for c in info.env_assertions or []],
    }


KEEP_ALL = ("retail", "airline")


def digest(records: dict[str, dict]) -> str:
    """sha256 of every task's record, in task-id order (the form mua's check recomputes)."""
    return hashlib.sha256(json.dumps(records, sort_keys=True).encode()).hexdigest()


def kept(domain: str, records: dict[str, dict], base_ids: list[str]) -> dict[str, dict]:
    if domain in KEEP_ALL:
        return records
    return {tid: records[tid] for tid in base_ids}


def main(domains: list[str]) -> None:
    out_path = Path(__file__).with_name("reference.json")
    out = json.loads(out_path.read_text()) if out_path.exists() else {}
    for domain in domains:
        make_env, tasks = _constructors()[domain]
        records = {task.id: reference_for(make_env, task) for task in tasks()}
        base_ids = list(records)
        if domain == "telecom":
            from tau2.domains.telecom.environment import get_tasks_split

            base_ids = get_tasks_split()["base"]
        out[domain] = kept(domain, records, base_ids)
        out.setdefault("digests", {})[domain] = digest(records)
        out_path.write_text(json.dumps(out, sort_keys=True, separators=(",", ":")) + "\n")
        print(domain, len(records), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:] or ["retail", "airline", "telecom"])
