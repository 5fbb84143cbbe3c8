"""In-memory tau databases: one read-only base per process, a cheap copy-on-write view per episode.

A domain database is a dict of tables (retail: orders, products, users; airline: flights,
reservations, users), each a dict of records keyed by id, exactly as in the public JSON files.
`BaseDB` holds the parsed tables once per process (cached by source key) together with each
record's canonical JSON, so hashing a view only re-serialises the records an episode touched.
`TauDB` is the per-episode view: reads go to the base, `mut()` copies one record into the
episode's overlay before it is changed. `export()` gives the whole database in the public layout
and `sha256()` the SHA-256 of its canonical (key-sorted, compact) JSON.

Deliberately not here: the tools that change records (retail_tools / airline_tools), file
parsing and validation (data_prep.tau), the reward (reward.py).
"""

from __future__ import annotations

import copy
import hashlib
import json
import threading
from collections.abc import Callable, Iterator
from typing import Any


def canonical_json(value: Any) -> str:
    """Key-sorted, compact JSON: the form whose SHA-256 identifies a database state."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def sha256_of(value: Any) -> str:
    return hashlib.sha256(canonical_json(value).encode("utf-8")).hexdigest()


class BaseDB:
    """The pristine tables of one database; never mutated after construction."""

    def __init__(self, key: str, tables: dict[str, dict[str, dict]]):
        self.key = key
        self.tables = tables
        self._record_json: dict[str, dict[str, bytes]] = {}
        self._lock = threading.Lock()

    def record_json(self, table: str) -> dict[str, bytes]:
        """Canonical JSON of every base record of `table` (computed once, then cached)."""
        cached = self._record_json.get(table)
        if cached is None:
            with self._lock:
                cached = self._record_json.get(table)
                if cached is None:
                    cached = {
                        k: canonical_json(v).encode("utf-8") for k, v in self.tables[table].items()
                    }
                    self._record_json[table] = cached
        return cached

    def view(self) -> TauDB:
        return TauDB(self)


_BASES: dict[str, BaseDB] = {}
_BASES_LOCK = threading.Lock()


def cached_base(key: str, load: Callable[[], dict[str, dict[str, dict]]]) -> BaseDB:
    """The process-wide `BaseDB` for `key`, calling `load()` only the first time."""
    base = _BASES.get(key)
    if base is None:
        with _BASES_LOCK:
            base = _BASES.get(key)
            if base is None:
                base = BaseDB(key, load())
                _BASES[key] = base
    return base


class TauDB:
    """One episode's database: base records plus a copy-on-write overlay.

    Records returned by `get()` may belong to the shared base: callers read them and must call
    `mut()` before changing anything.
    """

    def __init__(self, base: BaseDB):
        self.base = base
        self._overlay: dict[str, dict[str, dict]] = {t: {} for t in base.tables}

    @property
    def table_names(self) -> list[str]:
        return list(self.base.tables)

    def get(self, table: str, key: str) -> dict | None:
        """A record for reading (do not modify it), or None when absent."""
        if not isinstance(key, str):
            return None
        over = self._overlay[table]
        if key in over:
            return over[key]
        return self.base.tables[table].get(key)

    def has(self, table: str, key: str) -> bool:
        return self.get(table, key) is not None

    def mut(self, table: str, key: str) -> dict:
        """The record for changing: copied into this episode's overlay on first use."""
        over = self._overlay[table]
        if key not in over:
            over[key] = copy.deepcopy(self.base.tables[table][key])
        return over[key]

    def put(self, table: str, key: str, record: dict) -> None:
        """Insert or replace a whole record."""
        self._overlay[table][key] = record

    def keys(self, table: str) -> list[str]:
        """Ids in the public files' order, then ids added by this episode."""
        base = self.base.tables[table]
        return list(base) + [k for k in self._overlay[table] if k not in base]

    def values(self, table: str) -> Iterator[dict]:
        for key in self.keys(table):
            yield self.get(table, key)

    def items(self, table: str) -> Iterator[tuple[str, dict]]:
        for key in self.keys(table):
            yield key, self.get(table, key)

    def changed_keys(self) -> dict[str, list[str]]:
        """Ids of the records this episode copied or added, per table."""
        return {t: sorted(o) for t, o in self._overlay.items() if o}

    def export(self) -> dict[str, dict[str, dict]]:
        """The whole database (a deep copy) in the layout of the public JSON files."""
        return {t: {k: copy.deepcopy(v) for k, v in self.items(t)} for t in self.table_names}

    def sha256(self) -> str:
        """SHA-256 of the canonical JSON of the whole database (equal to `sha256_of(export())`)."""
        h = hashlib.sha256()
        h.update(b"{")
        for ti, table in enumerate(sorted(self.table_names)):
            base_json = self.base.record_json(table)
            over = self._overlay[table]
            h.update(b"," if ti else b"")
            h.update(json.dumps(table).encode() + b":{")
            for ki, key in enumerate(sorted(self.keys(table))):
                body = canonical_json(over[key]).encode("utf-8") if key in over else base_json[key]
                h.update((b"," if ki else b"") + json.dumps(key).encode() + b":" + body)
            h.update(b"}")
        h.update(b"}")
        return h.hexdigest()
