"""Prefix reuse for the `hf` engine: the KV of each trajectory's last finished turn, by route key.

All turns of one trajectory share a `route_key`, and turn k+1's prompt starts with turn k's prompt
and sampled tokens. When a request finishes, `PrefixStore.put` keeps the KV of every token the
model was fed (the prompt and all sampled tokens but the last); the next request with the same
key takes the longest common prefix of those tokens and its prompt (`take`), so only the new
suffix (the environment's reply) is prefilled. Entries are evicted least recently used beyond
`max_bytes`; the engine clears the store whenever its weights change, since a KV computed with
old weights is not the new policy's.

Deliberately not here: sharing prefixes across route keys (a radix tree), paging, eviction by
anything but recency. Keys and values are stored per layer as [kv_heads, tokens, head_dim].
"""

from __future__ import annotations

from collections import OrderedDict


class PrefixStore:
    def __init__(self, max_bytes: int, min_reuse_tokens: int = 8):
        self.max_bytes = max_bytes
        self.min_reuse_tokens = min_reuse_tokens
        self.hits = 0
        self.reused_tokens = 0
        self._entries: OrderedDict[str, tuple[list[int], list[tuple], int]] = OrderedDict()
        self._bytes = 0

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        self._entries.clear()
        self._bytes = 0

    def put(self, route_key: str, token_ids: list[int], layers: list[tuple]) -> None:
        """Keep `layers` [(keys, values)], each [kv_heads, len(token_ids), head_dim], under the key."""
        if not route_key or self.max_bytes <= 0:
            return
        self._drop(route_key)
        size = sum(k.numel() * k.element_size() + v.numel() * v.element_size() for k, v in layers)
        if size > self.max_bytes:
            return
        self._entries[route_key] = (list(token_ids), layers, size)
        self._bytes += size
        while self._bytes > self.max_bytes:
            self._drop(next(iter(self._entries)))

    def take(self, route_key: str, prompt_ids: list[int]) -> tuple[int, list[tuple] | None]:
        """(number of leading prompt tokens whose KV is reused, the stored layers) or (0, None).

        At least one prompt token is always left to prefill (its logits sample the next token).
        The entry leaves the store: the request will put its own, longer one when it finishes.
        """
        entry = self._entries.get(route_key) if route_key else None
        if entry is None:
            return 0, None
        stored, layers, _ = entry
        self._drop(route_key)
        limit = min(len(stored), len(prompt_ids) - 1)
        common = 0
        while common < limit and stored[common] == prompt_ids[common]:
            common += 1
        if common < self.min_reuse_tokens:
            return 0, None
        self.hits += 1
        self.reused_tokens += common
        return common, layers

    def _drop(self, route_key: str) -> None:
        entry = self._entries.pop(route_key, None)
        if entry is not None:
            self._bytes -= entry[2]
