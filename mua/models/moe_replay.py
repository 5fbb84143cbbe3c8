"""Mixture-of-experts routing: record which experts each token went to, and replay it.

A record is a uint8 array [tokens, layers, top_k] (uint16 past 255 experts), the router's order;
a token without one holds `no_route(dtype)`. With a trajectory it is `encode`d as {"layers",
"top_k", "dtype", "data"} (base64). `routing(model, replay=None, enforce=False)` is the one place
routers are touched: for one forward each router also records its experts (`Capture.used`),
counts disagreements with `replay` (`Capture.compared`, `Capture.differ`) and, with `enforce`,
uses the recorded experts with the router's own gate weights (docs/moe.md). `Replay` carries a
batch's records through the trainer's forwards. Not here: where records come from, `row_routes`.
"""

from __future__ import annotations

import base64
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F

# routers whose forward(hidden [N, H]) returns (logits [N, E], gate weights [N, k], experts [N, k])
_SOFTMAX_THEN_TOPK = ("Qwen3MoeTopKRouter", "Qwen2MoeTopKRouter", "OlmoeTopKRouter")
_TOPK_THEN_SOFTMAX = ("GptOssTopKRouter",)


def routers(model) -> list:
    """The model's MoE routers in layer order (empty for a dense model)."""
    known = _SOFTMAX_THEN_TOPK + _TOPK_THEN_SOFTMAX
    return [m for _, m in model.named_modules() if type(m).__name__ in known]


def is_moe(model) -> bool:
    return bool(routers(model))


def route_dtype(num_experts: int):
    """uint8 up to 255 experts (255 means "no record"), else uint16."""
    return np.uint8 if num_experts < 255 else np.uint16


def no_route(dtype) -> int:
    return int(np.iinfo(dtype).max)


@dataclass
class Capture:
    """What one `routing` context saw: per layer, the experts used for each forward ([N, k] each,
    in call order); the (token, layer) decisions compared with a record, those where the
    router's own choice differs from it (`differ`) and those where the experts used differ from
    it (`unfollowed`: 0 when the record is enforced)."""

    used: list[list[torch.Tensor]] = field(default_factory=list)
    compared: int = 0
    differ: int = 0
    unfollowed: int = 0
    # with `keep_logits`: per layer, the router logits of each forward (with their gradients)
    logits: list[list[torch.Tensor]] | None = None

    def stacked(self, call: int = -1) -> torch.Tensor:
        """The experts every layer used for the tokens of forward `call`: [N, layers, k]."""
        return torch.stack([layer[call] for layer in self.used], dim=1)


def _gates(router, logits: torch.Tensor, experts: torch.Tensor) -> torch.Tensor:
    """The gate weights the router gives `experts` [N, k] from its `logits` [N, E]."""
    if type(router).__name__ in _TOPK_THEN_SOFTMAX:
        return F.softmax(logits.gather(-1, experts), dim=1, dtype=logits.dtype)
    probs = F.softmax(logits, dtype=torch.float, dim=-1)
    gates = probs.gather(-1, experts)
    if getattr(router, "norm_topk_prob", False):
        gates = gates / gates.sum(dim=-1, keepdim=True)
    return gates.to(logits.dtype)


def _same_sets(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """[N] True where the rows of a and b [N, k] hold the same experts (in any order)."""
    return (a.sort(dim=-1).values == b.sort(dim=-1).values).all(dim=-1)


def _replaying_forward(router, layer: int, capture: Capture, replay, enforce: bool):
    original = type(router).forward

    def forward(hidden_states):
        logits, gates, experts = original(router, hidden_states)
        recomputed = torch._C._current_graph_task_id() != -1  # activation checkpointing's rerun
        if replay is not None:
            record = replay[:, layer, :].to(experts.device)
            known = (record >= 0).all(dim=-1)  # [N]
            same = _same_sets(experts, record.clamp(min=0))
            if not recomputed:
                capture.compared += int(known.sum())
                capture.differ += int((known & ~same).sum())
            if enforce and bool(known.any()):
                experts = torch.where(known[:, None], record.to(experts.dtype), experts)
                gates = torch.where(known[:, None], _gates(router, logits, experts), gates)
            if not recomputed:
                followed = _same_sets(experts, record.clamp(min=0))
                capture.unfollowed += int((known & ~followed).sum())
        if not recomputed:
            capture.used[layer].append(experts.detach())
            if capture.logits is not None:
                capture.logits[layer].append(logits)
        return logits, gates, experts

    return forward


@contextmanager
def routing(
    model, replay: torch.Tensor | None = None, enforce: bool = False, keep_logits: bool = False
):
    """Record the experts every router uses during the forwards run inside; with `replay`
    [N, layers, k] (long, -1 where a token has no record) compare with it, and with `enforce`
    route each recorded token to its recorded experts; with `keep_logits` keep the router
    logits too (`load_balancing_loss`). Yields a `Capture`."""
    found = routers(model)
    capture = Capture(used=[[] for _ in found])
    if keep_logits:
        capture.logits = [[] for _ in found]
    if replay is not None and replay.shape[1] != len(found):
        raise ValueError(
            f"the routing record has {replay.shape[1]} MoE layers, the model {len(found)}"
        )
    for layer, router in enumerate(found):
        router.forward = _replaying_forward(router, layer, capture, replay, enforce)
    try:
        yield capture
    finally:
        for router in found:
            del router.forward  # the class's forward again


def load_balancing_loss(capture: Capture, num_experts: int) -> torch.Tensor:
    """Switch Transformer's load-balancing loss of the last forward, averaged over MoE layers:
    num_experts x sum over experts of (its share of the routed (token, slot) pairs) x (its mean
    router probability). 1 when the load is even; gradients reach the router through the
    probabilities."""
    losses = []
    for logits, used in zip(capture.logits or [], capture.used, strict=True):
        probs = torch.softmax(logits[-1].float(), dim=-1)  # [N, E]
        counts = torch.bincount(used[-1].reshape(-1), minlength=num_experts).float()
        share = counts / counts.sum().clamp(min=1)
        losses.append(num_experts * (share * probs.mean(dim=0)).sum())
    return torch.stack(losses).mean()


@dataclass
class Replay:
    """Per-sequence records (None: the sequence has none) for the trainer's forwards; `enforce`
    routes recorded tokens to their experts (algo.routing_replay=r3). `compared` and `differ`
    sum the forwards' (token, layer) decisions with a record and those the router made
    differently; `unfollowed` those routed to other experts than recorded."""

    routes: list
    enforce: bool
    compared: int = 0
    differ: int = 0
    unfollowed: int = 0

    def add(self, capture: Capture) -> None:
        self.compared += capture.compared
        self.differ += capture.differ
        self.unfollowed += capture.unfollowed


@contextmanager
def replaying(model, mb_routes: torch.Tensor | None, replay: Replay | None, keep_logits=False):
    """`routing` for one packed row when there is a record to compare with or enforce (its
    counts added to `replay`) or router logits to keep; otherwise nothing is touched."""
    if (replay is None or mb_routes is None) and not keep_logits:
        yield None
        return
    routes = mb_routes if replay is not None else None
    enforce = replay is not None and replay.enforce
    with routing(model, routes, enforce, keep_logits) as capture:
        yield capture
    if replay is not None:
        replay.add(capture)


# ---- records kept with trajectories ----------------------------------------------------------


def compact(routes: np.ndarray) -> np.ndarray:
    """An engine's record (any integer dtype, negative for none) as uint8 (uint16 past 254
    experts), `no_route` where it has none."""
    routes = np.asarray(routes)
    dtype = route_dtype(int(routes.max(initial=0)) + 1)
    out = routes.astype(dtype)
    out[routes < 0] = no_route(dtype)
    return out


def encode(routes: np.ndarray) -> dict:
    """A record [T, layers, k] as JSON-friendly fields (base64 of its bytes)."""
    return {
        "layers": int(routes.shape[1]),
        "top_k": int(routes.shape[2]),
        "dtype": routes.dtype.name,
        "data": base64.b64encode(np.ascontiguousarray(routes).tobytes()).decode("ascii"),
    }


def decode(fields: dict) -> np.ndarray | None:
    """The record `encode` wrote ([T, layers, k]); None for an empty dict."""
    if not fields:
        return None
    dtype = np.dtype(fields["dtype"])
    flat = np.frombuffer(base64.b64decode(fields["data"]), dtype=dtype)
    return flat.reshape(-1, int(fields["layers"]), int(fields["top_k"]))


def fitted(routes: np.ndarray | None, length: int) -> np.ndarray | None:
    """`routes` cut or padded (with `no_route`) to `length` tokens."""
    if routes is None:
        return None
    if len(routes) >= length:
        return routes[:length]
    pad = np.full((length - len(routes), *routes.shape[1:]), no_route(routes.dtype), routes.dtype)
    return np.concatenate([routes, pad])


def as_long(routes: np.ndarray | None, length: int, shape: tuple[int, int]) -> torch.Tensor:
    """A sequence's record as a long tensor [length, layers, k], -1 where there is none (also
    for a sequence with no record at all: `routes` None)."""
    out = torch.full((length, *shape), -1, dtype=torch.long)
    if routes is None:
        return out
    part = torch.from_numpy(fitted(routes, length).astype(np.int64))
    part[part == no_route(routes.dtype)] = -1
    return part


def row_routes(
    routes: list[np.ndarray | None],
    indices: list[int],
    lengths: list[int],
    row_of: list[int] | None,
    row_length: int,
) -> torch.Tensor | None:
    """The records of sequences `indices` laid out for a packed row of `row_length` tokens:
    [R, layers, k] long, -1 where a token has none; `row_of[j]` is the row position of the j-th
    token of the concatenated sequences (-1: not in the row), None when the row is the
    concatenation. A shared prefix fed once takes the last of its sequences' records. None when
    no sequence has a record."""
    present = [routes[i] for i in indices if routes[i] is not None]
    if not present:
        return None
    shape = tuple(present[0].shape[1:])
    flat = torch.cat([as_long(routes[i], n, shape) for i, n in zip(indices, lengths, strict=True)])
    if row_of is None:
        return flat
    where = torch.tensor(row_of, dtype=torch.long)
    row = torch.full((row_length, *shape), -1, dtype=torch.long)
    keep = where >= 0
    row[where[keep]] = flat[keep]
    return row
