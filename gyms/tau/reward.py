"""tau reward: the final database must equal the gold replay's, and every required output be said.

`replay(base, toolset_cls, actions)` runs gold actions on a fresh view (a transfer to a human
is not replayed: it changes nothing and ends the episode). `gold_hash` caches the replayed
database's SHA-256 per (database, actions) for the life of the process. `score` returns the
reward (1.0 iff both checks pass, as the public benchmark scores) and its named components
`db_match` and `outputs` (each 0.0 or 1.0; `outputs` is 1.0 when nothing is required).

Deliberately not here: when an episode ends (env.py).
"""

from __future__ import annotations

import copy
import threading

from gyms.tau.common_tools import TRANSFER_TOOL, Toolset, invoke
from gyms.tau.db import BaseDB, TauDB, canonical_json

_GOLD: dict[tuple[str, str], str] = {}
_GOLD_LOCK = threading.Lock()


def replay(base: BaseDB, toolset_cls: type[Toolset], actions: list[dict]) -> TauDB:
    """A fresh view with `actions` applied in order; failing actions change nothing, as in an episode."""
    db = base.view()
    tools = toolset_cls(db)
    for action in actions:
        if action["name"] == TRANSFER_TOOL:
            continue
        invoke(tools, action["name"], copy.deepcopy(action.get("kwargs", {})))
    return db


def gold_hash(base: BaseDB, toolset_cls: type[Toolset], actions: list[dict]) -> str:
    key = (base.key, canonical_json(actions))
    found = _GOLD.get(key)
    if found is None:
        found = replay(base, toolset_cls, actions).sha256()
        with _GOLD_LOCK:
            _GOLD[key] = found
    return found


def outputs_found(outputs: list[str], said: list[str]) -> dict[str, bool]:
    """Which required outputs appear (case-insensitive, commas removed) in some message to the user."""
    cleaned = [text.lower().replace(",", "") for text in said]
    return {out: any(out.lower() in text for text in cleaned) for out in outputs}


def score(
    db: TauDB, toolset_cls: type[Toolset], payload: dict, said: list[str]
) -> tuple[float, dict[str, float], dict]:
    """(reward, components, info) of a finished episode."""
    final_hash = db.sha256()
    expected_hash = gold_hash(db.base, toolset_cls, payload.get("actions", []))
    found = outputs_found(payload.get("outputs", []), said)
    db_match = 1.0 if final_hash == expected_hash else 0.0
    outputs_ok = 1.0 if all(found.values()) else 0.0
    info = {
        "db_hash": final_hash,
        "gold_db_hash": expected_hash,
        "outputs_found": found,
        "changed": db.changed_keys(),
    }
    return db_match * outputs_ok, {"db_match": db_match, "outputs": outputs_ok}, info


def changes_database(base: BaseDB, toolset_cls: type[Toolset], actions: list[dict]) -> bool:
    """Whether replaying `actions` leaves a database different from the untouched one.

    Compares only the records the replay touched, each in canonical JSON: the same verdict as
    comparing the whole database's hashes, without serialising the whole database.
    """
    db = replay(base, toolset_cls, actions)
    for table, keys in db.changed_keys().items():
        pristine = base.record_json(table)
        for key in keys:
            record = db.get(table, key)
            if record is None or canonical_json(record).encode("utf-8") != pristine.get(key):
                return True
    return False
