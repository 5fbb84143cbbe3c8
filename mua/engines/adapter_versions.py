"""Versioned LoRA adapter names an engine holds, and which requests in flight name them.

With `rollout.lora_sync: adapter` each push is a new name (`adapter_name(n)`, the same on every
rank); `AdapterVersions` gives requests the live name (`begin`/`end`), makes a name live (`adopt`;
`loaded=False` for a follower that never unloads what it did not load), returns the older versions
no request names, and remembers each name's `weight_version` (`version_of`), since no covered
SGLang release takes one with an adapter. Shared by the hf engine and the SGLang client.
Not here: loading or unloading (the engines do).
"""

from __future__ import annotations

import threading
from collections import Counter

ADAPTER_PREFIX = "mua-lora"


def adapter_name(sequence: int) -> str:
    """The name of the adapter of push number `sequence`."""
    return f"{ADAPTER_PREFIX}-{int(sequence)}"


class AdapterVersions:
    """The live adapter name, the versions loaded by this client, and requests in flight per name."""

    def __init__(self) -> None:
        self.live: str | None = None
        self.loaded: list[str] = []  # loaded by this client and not unloaded yet, oldest first
        self.versions: dict[str, str] = {}  # name -> the weight_version its push carried
        self._inflight: Counter[str] = Counter()
        self._lock = threading.Lock()

    def begin(self) -> str | None:
        """The live adapter's name for a request starting now (None: the base model)."""
        with self._lock:
            if self.live is not None:
                self._inflight[self.live] += 1
            return self.live

    def end(self, name: str | None) -> list[str]:
        """A request naming `name` finished: the versions now free to unload."""
        if name is None:
            return []
        with self._lock:
            self._inflight[name] -= 1
            if self._inflight[name] <= 0:
                del self._inflight[name]
            return self._retire()

    def adopt(self, name: str, loaded: bool = True, weight_version: str | None = None) -> list[str]:
        """`name` (carrying `weight_version`) is live from now on; the older versions free to
        unload (taken off `loaded`)."""
        with self._lock:
            if loaded and name not in self.loaded:
                self.loaded.append(name)
            if weight_version is not None:
                self.versions[name] = str(weight_version)
            self.live = name
            return self._retire()

    def version_of(self, name: str | None) -> str | None:
        """The weight_version adapter `name` carried (None: unknown, or no adapter)."""
        with self._lock:
            return self.versions.get(name) if name is not None else None

    def in_flight(self, name: str) -> int:
        with self._lock:
            return self._inflight.get(name, 0)

    def _retire(self) -> list[str]:
        free = [n for n in self.loaded if n != self.live and self._inflight.get(n, 0) == 0]
        self.loaded = [n for n in self.loaded if n not in free]
        keep = set(self.loaded) | set(self._inflight) | {self.live}
        self.versions = {n: v for n, v in self.versions.items() if n in keep}
        return free
