"""Sampling for the `hf` engine's batches: one request's row, its seeded draws, and its record.

`sample(logits, rows)` draws one token per row, vectorised over the batch, and returns each
token's log_softmax(logits / T), T the row's temperature (T = 1 when greedy), computed before
top-k/top-p filtering: what the trainer recomputes. A row's draws come from its own generator
(`row_generator(seed)`), so a request's tokens do not depend on its batch mates. `record` appends
the draws to the rows and says which finished (a stop id or the token budget). For a mixture of
experts, `route_dtype`, `no_routes` and `take_prefix` start and type a row's routing record.

Deliberately not here: the KV cache and forwards (`hf_slots`, `hf_batch`), threads (the engine).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mua.engines.engine_contract import GenerationRequest, GenerationResult, SamplingParams


@dataclass
class Row:
    """One request being generated; `handle` is whatever the engine needs to deliver the result."""

    request: GenerationRequest
    handle: Any = None
    generator: Any = None
    uniforms: list[float] = field(default_factory=list)  # drawn ahead, next one last
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    finish_reason: str = "length"
    # mixture of experts: the experts each fed token went to, [n, layers, k] uint8 chunks in
    # token order (the prompt, then every sampled token but the last)
    routes: list = field(default_factory=list)

    def result(self) -> GenerationResult:
        meta = {}
        if self.routes:
            meta["routed_experts"] = torch_cat_numpy(self.routes)
        return GenerationResult(
            token_ids=self.token_ids,
            logprobs=self.logprobs,
            finish_reason=self.finish_reason,
            meta=meta,
        )

    def record(self, token: int, logprob: float) -> bool:
        """Append one sampled token; True when the row is finished."""
        self.token_ids.append(token)
        self.logprobs.append(logprob)
        if token in self.request.sampling.stop_token_ids:
            self.finish_reason = "stop"
            return True
        return len(self.token_ids) >= self.request.sampling.max_new_tokens


def route_dtype(model):
    """The torch dtype of the model's routing records (uint8 up to 254 experts, else int16);
    None for a dense model."""
    import numpy as np
    import torch

    from mua.models import moe_replay

    found = moe_replay.routers(model)
    if not found:
        return None
    return torch.uint8 if moe_replay.route_dtype(found[0].num_experts) == np.uint8 else torch.int16


def no_routes(model, dtype, tokens: int):
    """A record of `tokens` tokens whose experts are unknown: [tokens, MoE layers, k]."""
    import numpy as np
    import torch

    from mua.models import moe_replay

    found = moe_replay.routers(model)
    fill = moe_replay.no_route(np.dtype(str(dtype).split(".")[-1]))
    return torch.full((tokens, len(found), found[0].top_k), fill, dtype=dtype)


def take_prefix(store, row: Row, model, dtype):
    """(tokens reused, their KV layers) from the prefix `store` (None: no store) for `row`'s
    prompt; a mixture of experts' row starts its record with the reused tokens' experts
    (unknown when the store kept none)."""
    if store is None:
        return 0, None
    start, layers, routes = store.take_with_routes(row.request.route_key, row.request.prompt_ids)
    if start and dtype is not None:
        row.routes = [routes if routes is not None else no_routes(model, dtype, start)]
    return start, layers


def torch_cat_numpy(chunks: list):
    """Tensor chunks [n_i, ...] as one numpy array [sum n_i, ...]."""
    import torch

    return torch.cat(chunks).numpy()


def record(rows: list[Row], tokens: list[int], lps: list[float]) -> tuple[list[Row], list[int]]:
    """Append each row's draw; returns (the rows that finished, the positions of the others)."""
    finished, keep = [], []
    for i, row in enumerate(rows):
        if row.record(tokens[i], lps[i]):
            finished.append(row)
        else:
            keep.append(i)
    return finished, keep


def row_generator(seed: int | None, device):
    """A generator seeded for one request (None without a seed: torch's global one is used)."""
    if seed is None:
        return None
    import torch

    g = torch.Generator(device=device)
    g.manual_seed(int(seed))
    return g


def sample(logits, rows: list[Row]) -> tuple[list[int], list[float]]:
    """One token per row and its log_softmax(logits / T); logits [B, V] float32.

    Vectorised over the batch: top-k/top-p filtering per group of rows sharing those settings,
    then inverse-CDF sampling: each row draws one uniform u from its own seeded generator (so a
    request's tokens do not depend on its batch mates) and takes the first token whose cumulative
    probability exceeds u times the total. One random number per row and token, where an
    exponential race needs one per vocabulary entry; a row draws them `_UNIFORMS_AHEAD` at a time
    (the same numbers, in the same order, as one draw per token). Greedy rows take the argmax."""
    import torch

    params: list[SamplingParams] = [r.request.sampling for r in rows]
    temps = [p.temperature if p.temperature > 0 else 1.0 for p in params]
    scaled = logits  # [B, V]; dividing by a temperature of 1 would change nothing
    if any(t != 1.0 for t in temps):
        scaled = logits / torch.tensor(temps, dtype=logits.dtype, device=logits.device)[:, None]
    logp = torch.log_softmax(scaled, dim=-1)  # [B, V]
    sampled = [i for i, p in enumerate(params) if p.temperature > 0]
    every = bool(sampled) and len(sampled) == len(params)
    tokens = None if every else torch.argmax(scaled, dim=-1)  # [B]; kept for greedy rows
    if sampled:
        index = None if every else torch.tensor(sampled, device=logits.device)
        filtered = _filter(scaled if every else scaled[index], [params[i] for i in sampled])
        cdf = torch.softmax(filtered, dim=-1).cumsum(dim=-1)  # [S, V]
        u = torch.tensor([_next_uniform(rows[i], cdf) for i in sampled], dtype=cdf.dtype)
        u = u.to(cdf.device)  # [S]
        drawn = torch.searchsorted(cdf, (u * cdf[:, -1])[:, None], right=True)[:, 0]
        drawn = drawn.clamp(max=cdf.shape[-1] - 1)
        if every:
            tokens = drawn
        else:
            tokens[index] = drawn
    picked = logp.gather(-1, tokens[:, None])[:, 0]
    return tokens.tolist(), picked.tolist()


def _filter(scaled, params: list[SamplingParams]):
    """Top-k then top-p (keeping the token that crosses top_p) on [S, V] logits, per settings group."""
    import torch

    groups: dict[tuple[int, float], list[int]] = {}
    for i, p in enumerate(params):
        top_k, top_p = p.top_k, p.top_p
        if (top_k and top_k < scaled.shape[-1]) or top_p < 1.0:
            groups.setdefault((top_k, top_p), []).append(i)
    if not groups:
        return scaled  # nothing to filter (read only)
    out = scaled.clone()
    for (top_k, top_p), members in groups.items():
        index = torch.tensor(members, device=scaled.device)
        rows = out[index]
        if top_k and top_k < rows.shape[-1]:
            kth = torch.topk(rows, top_k, dim=-1).values[:, -1:]
            rows = rows.masked_fill(rows < kth, float("-inf"))
        if top_p < 1.0:
            sorted_logits, order = torch.sort(rows, dim=-1, descending=True)
            probs = torch.softmax(sorted_logits, dim=-1)
            outside_sorted = probs.cumsum(-1) - probs > top_p
            outside = torch.zeros_like(outside_sorted).scatter(-1, order, outside_sorted)
            rows = rows.masked_fill(outside, float("-inf"))
        out[index] = rows
    return out


# Uniforms a row draws at once: one torch.rand call per row and step cost more than the rest of
# the sampling (32 rows on CPU); torch.rand(n) gives the n numbers n calls would, in order.
_UNIFORMS_AHEAD = 64


def _next_uniform(row: Row, like) -> float:
    """The row's next U[0, 1) number from its generator (or torch's), in `like`'s dtype."""
    if not row.uniforms:
        import torch

        left = row.request.sampling.max_new_tokens - len(row.token_ids)
        count = max(1, min(_UNIFORMS_AHEAD, left))
        drawn = torch.rand(count, generator=row.generator, dtype=like.dtype, device=like.device)
        row.uniforms = drawn.tolist()[::-1]
    return row.uniforms.pop()
