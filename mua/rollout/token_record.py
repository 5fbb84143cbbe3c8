"""`TokenRecord`: one sample's per-token record, from the sampler to the update.

Per token: its id, source, loss mask, the engine's log-prob, assistant turn and the policy version
that sampled it, and, for a mixture of experts, the engine's routed experts of the leading tokens
it fed (`routes`, numpy [n <= T, layers, k], `mua.models.moe_replay`). The transcript builder and
the gateway's session write it, `Trajectory` and `RLSample` hold it, `to_dict`/`from_dict` are its
one JSON form (the rollout files' keys and a checkpoint's in-flight samples), `to_tensors` the form
the update reads. Not here: what the tokens are (the builder, the session), advantages, packing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mua.models.moe_replay import decode, encode, fitted, no_route

LISTS = ("token_ids", "sources", "loss_mask", "logprobs", "turn_index", "versions")
_JSON = {"versions": "token_versions"}  # field -> its key in a rollout file, where they differ


@dataclass(frozen=True, eq=False)
class RecordTensors:
    """A record's per-token numbers as tensors, made once: ids, mask, turn and versions int64,
    the engine's log-probs float64 (its numbers exactly; a loss casts them as it reads them)."""

    token_ids: Any
    loss_mask: Any
    logprobs: Any
    turn_index: Any
    versions: Any


@dataclass(eq=False)
class TokenRecord:
    """Parallel per-token lists (`LISTS`; `versions` is -1 off sampled tokens) and `routes`."""

    token_ids: list[int] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)
    loss_mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    turn_index: list[int] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)
    routes: Any = None

    def __len__(self) -> int:
        return len(self.token_ids)

    def __eq__(self, other) -> bool:
        if not isinstance(other, TokenRecord):
            return NotImplemented
        if any(getattr(self, k) != getattr(other, k) for k in LISTS):
            return False
        if self.routes is None or other.routes is None:
            return self.routes is None and other.routes is None
        return self.routes.dtype == other.routes.dtype and np.array_equal(self.routes, other.routes)

    def append(
        self, ids: list[int], source: str, mask: int, logprobs=None, turn: int = -1, version=-1
    ) -> None:
        """Tokens of one piece: sampled ones (mask 1) carry their log-probs, turn and version."""
        n = len(ids)
        self.token_ids.extend(ids)
        self.sources.extend([source] * n)
        self.loss_mask.extend([mask] * n)
        self.logprobs.extend(list(logprobs) if logprobs is not None else [0.0] * n)
        self.turn_index.extend([turn] * n)
        self.versions.extend([version] * n)

    def truncate(self, length: int) -> None:
        """Forget every token from position `length` on (routes too)."""
        for name in LISTS:
            del getattr(self, name)[length:]
        if self.routes is not None:
            self.routes = self.routes[:length]

    def add_routes(self, routes) -> None:
        """The engine's routed experts [n, layers, k] of the first n tokens (a turn's prompt
        and its sampled tokens but the last): positions already recorded keep their first record
        (the experts their own turn was sampled with), later ones are added."""
        if self.routes is None or not len(self.routes):
            self.routes = routes
        elif len(routes) > len(self.routes):
            self.routes = np.concatenate([self.routes, routes[len(self.routes) :]])

    def fitted_routes(self) -> np.ndarray | None:
        """`routes` padded with `no_route` to one entry per token (None: no record)."""
        return fitted(self.routes, len(self))

    def slice(self, start: int, end: int, loss_mask: list[int] | None = None) -> TokenRecord:
        """Tokens [start, end) as their own record (`loss_mask`: that span's mask instead)."""
        out = TokenRecord(**{k: list(getattr(self, k)[start:end]) for k in LISTS})
        if loss_mask is not None:
            out.loss_mask = list(loss_mask)
        routes = self.fitted_routes()
        out.routes = None if routes is None else routes[start:end]
        return out

    @classmethod
    def concat(cls, records: list[TokenRecord]) -> TokenRecord:
        """Records one after another (a session's samples); when one has routes, every record
        but the last has its routes padded with `no_route` to its length."""
        out = cls()
        for r in records:
            for k in LISTS:
                getattr(out, k).extend(getattr(r, k))
        shaped = next((r.routes for r in records if r.routes is not None), None)
        if shaped is not None:
            none = np.full((0, *shaped.shape[1:]), no_route(shaped.dtype), shaped.dtype)
            parts = [fitted(none if r.routes is None else r.routes, len(r)) for r in records[:-1]]
            last = records[-1].routes
            out.routes = np.concatenate([*parts, none if last is None else last])
        return out

    def to_tensors(self) -> RecordTensors:
        """The per-token lists but `sources` as tensors (`routes` stay the numpy record)."""
        import torch

        longs = ("token_ids", "loss_mask", "turn_index", "versions")
        out = {k: torch.tensor(getattr(self, k), dtype=torch.long) for k in longs}
        return RecordTensors(**out, logprobs=torch.tensor(self.logprobs, dtype=torch.float64))

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form: the lists under their rollout-file keys, `routed_experts` (base64 of
        the routes, `moe_replay.encode`; {} without)."""
        out: dict[str, Any] = {_JSON.get(k, k): list(getattr(self, k)) for k in LISTS}
        out["routed_experts"] = {} if self.routes is None else encode(self.routes[: len(self)])
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TokenRecord:
        """The record `to_dict` wrote (missing lists stay empty: older files have no versions)."""
        out = cls(**{k: list(data.get(_JSON.get(k, k)) or []) for k in LISTS})
        out.routes = decode(data.get("routed_experts") or {})
        return out

    def shifted(self, by: int) -> TokenRecord:
        """A copy whose sampled tokens' (turn >= 0) versions are `by` later (a checkpoint counts
        them from the policy it holds)."""
        out = TokenRecord(**{k: list(getattr(self, k)) for k in LISTS}, routes=self.routes)
        out.versions = [v + by if t >= 0 else v for v, t in zip(self.versions, self.turn_index)]
        return out
