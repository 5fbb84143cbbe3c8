"""Prefix reuse for the `hf` engine: the KV of finished requests, by route key or by content.

`PrefixStore.put` keeps the KV of every token a finished request fed (nothing for
`keep_prefix=False`); `take` gives the next request with the same `route_key` the longest common
prefix, and keyless requests match entries by content (scan, most recently used first).
`take_with_routes` also hands back a mixture of experts' routed experts. Entries are evicted least
recently used beyond `max_bytes`; KV is stored per layer as [kv_heads, tokens, head_dim] and
callers copy from it, never write into it. Not here: paging, a radix tree.
"""

from __future__ import annotations

from collections import OrderedDict
from itertools import count


class PrefixStore:
    def __init__(self, max_bytes: int, min_reuse_tokens: int = 8):
        self.max_bytes = max_bytes
        self.min_reuse_tokens = min_reuse_tokens
        self.hits = 0
        self.reused_tokens = 0
        # key -> (token ids, [(keys, values)] per layer, bytes, routed experts or None)
        self._entries: OrderedDict[str, tuple] = OrderedDict()
        self._keyless: set[str] = set()  # entries matched by content
        self._serial = count()
        self._bytes = 0

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        self._entries.clear()
        self._keyless.clear()
        self._bytes = 0

    def put(self, route_key: str, token_ids: list[int], layers: list[tuple], routes=None) -> None:
        """Keep `layers` [(keys, values)], each [kv_heads, len(token_ids), head_dim], under the
        route key, or by content when the key is empty; `routes`: the tokens' routed experts."""
        if self.max_bytes <= 0 or len(token_ids) < self.min_reuse_tokens:
            return
        size = sum(k.numel() * k.element_size() + v.numel() * v.element_size() for k, v in layers)
        if size > self.max_bytes:
            return
        if route_key:
            self._drop(route_key)
            key = route_key
        else:
            key = f"\0content/{next(self._serial)}"  # not a route key the runner makes
            self._keyless.add(key)
        self._entries[key] = (list(token_ids), layers, size, routes)
        self._bytes += size
        while self._bytes > self.max_bytes:
            self._drop(next(iter(self._entries)))

    def take(self, route_key: str, prompt_ids: list[int]) -> tuple[int, list[tuple] | None]:
        """(number of leading prompt tokens whose KV is reused, the stored layers) or (0, None)
        (`take_with_routes` without the routed experts)."""
        start, layers, _ = self.take_with_routes(route_key, prompt_ids)
        return start, layers

    def take_with_routes(self, route_key: str, prompt_ids: list[int]):
        """(number of leading prompt tokens whose KV is reused, the stored layers, their routed
        experts or None) or (0, None, None).

        At least one prompt token is always left to prefill (its logits sample the next token).
        A route key's entry leaves the store (the request puts its own, longer one when it
        finishes); a keyless request's match stays, marked recently used.
        """
        if not route_key:
            return self._take_by_content(prompt_ids)
        entry = self._entries.get(route_key)
        if entry is None:
            return 0, None, None
        self._drop(route_key)
        return self._reuse(_common_prefix(entry[0], prompt_ids), entry)

    def _take_by_content(self, prompt_ids: list[int]):
        best, best_key = 0, None
        most = len(prompt_ids) - 1  # at least one prompt token is left to prefill
        for key in reversed(self._entries):  # the most recently used first: usually the match
            if best >= most:
                break
            if key not in self._keyless:
                continue
            stored = self._entries[key][0]
            # an entry can share more than `best` tokens only if it also has token `best`:
            # once the match is found, every other entry is passed over in one comparison
            if len(stored) <= best or stored[best] != prompt_ids[best]:
                continue
            common = _common_prefix(stored, prompt_ids)
            if common > best:
                best, best_key = common, key
        if best_key is None:
            return 0, None, None
        self._entries.move_to_end(best_key)
        return self._reuse(best, self._entries[best_key])

    def _reuse(self, common: int, entry):
        if common < self.min_reuse_tokens:
            return 0, None, None
        self.hits += 1
        self.reused_tokens += common
        routes = entry[3][:common] if entry[3] is not None else None
        return common, entry[1], routes

    def _drop(self, key: str) -> None:
        entry = self._entries.pop(key, None)
        self._keyless.discard(key)
        if entry is not None:
            self._bytes -= entry[2]


def _common_prefix(stored: list[int], prompt_ids: list[int]) -> int:
    """Leading tokens shared by `stored` and the prompt, leaving at least one prompt token."""
    limit = min(len(stored), len(prompt_ids) - 1)
    if stored[:limit] == prompt_ids[:limit]:  # the usual case: a whole earlier turn
        return limit
    # stored[:lo] matches, stored[:hi] does not: widen lo by doubling while it matches (prompts
    # of other conversations part early: small slices), then halve the gap
    lo, hi, step = 0, limit, 16
    while lo + step < hi and stored[lo : lo + step] == prompt_ids[lo : lo + step]:
        lo, step = lo + step, step * 2
    hi = min(hi, lo + step)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if stored[lo:mid] == prompt_ids[lo:mid]:
            lo = mid
        else:
            hi = mid
    return lo
