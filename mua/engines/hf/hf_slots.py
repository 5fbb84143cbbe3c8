"""Slot batching for the `hf` engine: every live row owns one slot of a preallocated KV cache.

`SlotBatch` serves decoder models whose layers all attend through transformers' attention interface
(Llama, Qwen2, Qwen3, Qwen3-MoE). Each layer's KV lives in one buffer [slots, kv_heads, columns,
head_dim]: row i owns slot i and a token's column is its position. One packed [1, T] forward per
step feeds every live row's last token and every newcomer's uncached prompt; `slot_attention`
(registered as `mua_engine`) writes KV in place and attends with one additive mask per step. For a
mixture of experts rows keep `meta["routed_experts"]` [tokens, layers, k] uint8.
Not here: threads and asyncio (the engine), paging, sliding-window layers (`supports` is False).
"""

from __future__ import annotations

from contextlib import nullcontext
from typing import Any

import torch
import torch.nn.functional as F

from mua.engines.hf.hf_sampling import Row, record, route_dtype, row_generator, sample, take_prefix
from mua.models import moe_replay

NAME = "mua_engine"
_registered = False


def slot_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """The engine's packed step when `mua_slots` is passed, plain sdpa attention otherwise."""
    plan = kwargs.get("mua_slots")
    if plan is None:  # the model used outside the engine (a probe, a test): ordinary sdpa
        from transformers.integrations.sdpa_attention import sdpa_attention_forward

        return sdpa_attention_forward(
            module, query, key, value, attention_mask, scaling=scaling, dropout=dropout, **kwargs
        )
    return plan.attend(module.layer_idx, query, key, value, scaling), None


def register() -> None:
    global _registered
    if not _registered:
        from transformers import AttentionInterface
        from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

        AttentionInterface.register(NAME, slot_attention)
        AttentionMaskInterface.register(NAME, sdpa_mask)
        _registered = True


def supports(model) -> bool:
    """True for Llama, Qwen2, Qwen3 and Qwen3-MoE models with full attention in every layer."""
    from mua.kernels.packed_attention import has_sliding_layers

    config = getattr(model, "config", None)
    if getattr(config, "model_type", "") not in ("llama", "qwen2", "qwen3", "qwen3_moe"):
        return False
    return not has_sliding_layers(config)


class _Group:
    """Rows in slots [start, end) that feed `width` query tokens each (fewer padded): their
    packed-token index [n, width] and the mask [n, 1, width, columns] over their slots."""

    @classmethod
    def decoding(cls, cols: list[int], device) -> _Group:
        """The live rows of slots 0..n-1, one token each (packed tokens 0..n-1) at columns
        `cols`: the same group as the general constructor builds, in a few operations."""
        g = cls.__new__(cls)
        g.start, g.end, g.width, g.columns = 0, len(cols), 1, max(cols) + 1
        g.index = g.valid = g.scatter = None  # read only when run_start is None
        g.run_start = 0
        seen = torch.arange(g.columns)[None, :] <= torch.tensor(cols)[:, None]  # [n, C]
        g.mask = seen[:, None, None].to(device)  # [n, 1, 1, C]
        g._grouped = {}
        return g

    def __init__(self, start: int, token_index, query_cols, columns: int, device):
        self.start = start
        self.end = start + token_index.shape[0]
        self.width = token_index.shape[1]
        self.columns = columns
        valid = token_index >= 0
        self.index = token_index.clamp(min=0).to(device)  # padding reads a real token, unused
        self.valid = valid.to(device)
        self.scatter = None if bool(valid.all()) else token_index[valid].to(device)
        # one token per row, consecutive in the packed step (decoding): the first one's index,
        # so queries and outputs are slices, not gathers and scatters
        first = int(token_index[0, 0]) if token_index.numel() else 0
        consecutive = torch.arange(first, first + token_index.shape[0])[:, None]
        self.run_start = (
            first if self.width == 1 and torch.equal(token_index, consecutive) else None
        )
        cols = torch.arange(columns)
        q = query_cols.clamp(min=0)  # a padded query may see column 0 (never nothing: no NaN)
        self.mask = (cols[None, None, :] <= q[:, :, None])[:, None].to(device)  # [n, 1, w, C]
        self._grouped: dict[int, Any] = {}

    def mask_for(self, groups: int, dtype):
        """The mask repeated for `groups` query heads per kv head, additive (0 or -inf, so sdpa
        converts nothing per layer): [n, 1, groups * width, C]."""
        if groups not in self._grouped:
            n = self.mask.shape[0]
            m = self.mask[:, :, None].expand(n, 1, groups, self.width, self.columns)
            m = m.reshape(n, 1, groups * self.width, self.columns)
            additive = torch.zeros(m.shape, dtype=dtype, device=m.device)
            self._grouped[groups] = additive.masked_fill_(~m, float("-inf"))
        return self._grouped[groups]

    def flat_mask_for(self, groups: int, kv_heads: int, dtype):
        """`mask_for` repeated for every kv head: [n * kv_heads, groups * width, C]."""
        key = (groups, kv_heads)
        if key not in self._grouped:
            m = self.mask_for(groups, dtype)
            n, _, rows, cols = m.shape
            self._grouped[key] = m.expand(n, kv_heads, rows, cols).reshape(-1, rows, cols)
        return self._grouped[key]


# Largest score matrix (elements) attended with two batched matmuls on CPU; bigger ones use sdpa.
_MATMUL_SCORES_MAX = 1 << 22


def _attend_matmul(q, keys, values, g: _Group, scaling: float):
    """Attention as two batched matmuls over views of the slot buffers (no copy of the KV):
    q [n, Hkv, r, D] -> [n, Hkv, r, D]. On CPU, for the short queries of decoding, this is about
    twice as fast as scaled_dot_product_attention with a mask (which copies and fills buffers)."""
    n, kv_heads, rows, dim = q.shape
    size = keys.shape[2]
    k = keys[g.start : g.end].view(n * kv_heads, size, dim)[:, : g.columns]
    v = values[g.start : g.end].view(n * kv_heads, size, dim)[:, : g.columns]
    mask = g.flat_mask_for(rows // g.width, kv_heads, q.dtype)
    scores = torch.baddbmm(
        mask, q.reshape(n * kv_heads, rows, dim), k.transpose(1, 2), alpha=scaling
    )
    return torch.bmm(scores.softmax(-1), v).view(n, kv_heads, rows, dim)


class _Plan:
    """One packed forward: where each new token's KV goes, and the row groups to attend over."""

    def __init__(self, kv: _SlotKV, slots, cols, groups: list[_Group]):
        self.kv, self.slots, self.cols, self.groups = kv, slots, cols, groups

    def attend(self, layer: int, query, key, value, scaling):
        """query [1, H, T, D], key/value [1, Hkv, T, D] -> [1, T, H, D]."""
        keys, values = self.kv.layers[layer]
        keys[self.slots, :, self.cols] = key[0].transpose(0, 1)
        values[self.slots, :, self.cols] = value[0].transpose(0, 1)
        tokens = query[0].transpose(0, 1)  # [T, H, D]
        heads, kv_heads, dim = tokens.shape[1], keys.shape[1], tokens.shape[2]
        per_kv = heads // kv_heads
        scale = dim**-0.5 if scaling is None else scaling
        on_cpu = tokens.device.type == "cpu"
        if len(self.groups) == 1 and self.groups[0].run_start == 0:
            out = None  # the group's output, as is, is the step's (plain decoding)
        else:
            out = tokens.new_empty(tokens.shape)
        for g in self.groups:
            n, w = g.end - g.start, g.width
            if g.run_start is None:
                q = tokens[g.index]  # [n, w, H, D]
            else:
                q = tokens[g.run_start : g.run_start + n, None]
            q = q.view(n, w, kv_heads, per_kv, dim).permute(0, 2, 3, 1, 4)
            q = q.reshape(n, kv_heads, per_kv * w, dim)
            if on_cpu and n * heads * w * g.columns <= _MATMUL_SCORES_MAX:
                att = _attend_matmul(q, keys, values, g, scale)
            else:
                att = F.scaled_dot_product_attention(
                    q,
                    keys[g.start : g.end, :, : g.columns],
                    values[g.start : g.end, :, : g.columns],
                    attn_mask=g.mask_for(per_kv, q.dtype),
                    scale=scale,
                )  # [n, Hkv, per_kv * w, D]
            att = att.view(n, kv_heads, per_kv, w, dim).permute(0, 3, 1, 2, 4)
            att = att.reshape(n, w, heads, dim)
            if out is None:
                return att.reshape(1, n, heads, dim)
            if g.run_start is not None:
                out[g.run_start : g.run_start + n] = att.reshape(n, heads, dim)
            elif g.scatter is None:
                out[g.index.view(-1)] = att.reshape(n * w, heads, dim)
            else:
                out[g.scatter] = att[g.valid]
        return out[None]


class _SlotKV:
    """Per layer, key and value buffers [slots, kv_heads, columns, head_dim]. Slots and columns
    grow by doubling (the used part is copied once per growth); `release` frees them."""

    def __init__(self, num_layers: int, kv_heads: int, head_dim: int, dtype, device):
        self.num_layers, self.kv_heads, self.head_dim = num_layers, kv_heads, head_dim
        self.dtype, self.device = dtype, device
        self.layers: list[tuple[Any, Any]] = []
        self.slots = self.columns = 0

    def ensure(self, used_rows: int, rows: int, columns: int) -> None:
        """Room for `rows` slots of `columns` columns; the first `used_rows` slots keep their data."""
        if rows <= self.slots and columns <= self.columns:
            return
        slots, size = max(8, self.slots), max(128, self.columns)
        while slots < rows:
            slots *= 2
        while size < columns:
            size *= 2
        shape = (slots, self.kv_heads, size, self.head_dim)
        grown = []
        for i in range(self.num_layers):
            pair = []
            for old in self.layers[i] if self.layers else (None, None):
                # zeros, not empty: masked columns are still multiplied (by 0), and NaN * 0 = NaN
                new = torch.zeros(shape, dtype=self.dtype, device=self.device)
                if old is not None and used_rows:
                    new[:used_rows, :, : self.columns] = old[:used_rows]
                pair.append(new)
            grown.append(tuple(pair))
        self.layers, self.slots, self.columns = grown, slots, size

    def release(self) -> None:
        self.layers, self.slots, self.columns = [], 0, 0

    def move(self, sources: list[int], targets: list[int], columns: int) -> None:
        """Copy slots `sources` into slots `targets` (first `columns` columns)."""
        src = torch.tensor(sources, device=self.device)
        dst = torch.tensor(targets, device=self.device)
        for keys, values in self.layers:
            keys[dst, :, :columns] = keys[src, :, :columns]
            values[dst, :, :columns] = values[src, :, :columns]


class SlotBatch:
    """Live rows (row i in slot i), their lengths (= the next position) and last sampled tokens."""

    def __init__(self, model, device, prefix_store=None):
        from mua.models.model_loading import accepts_logits_to_keep

        register()
        model.config._attn_implementation = NAME
        config = model.config
        heads = config.num_attention_heads
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
        kv_heads = getattr(config, "num_key_value_heads", None) or heads
        dtype = next(model.parameters()).dtype
        self.model, self.device = model, device
        self.prefix_store = prefix_store
        self.kv = _SlotKV(config.num_hidden_layers, kv_heads, head_dim, dtype, device)
        self.keep_selected_logits = accepts_logits_to_keep(model)
        self.can_merge = True  # newcomers join a running batch between two steps
        self.shared_prompts = 0
        self._no_mask = torch.ones((1, 1, 1, 1), dtype=torch.bool, device=device)
        self.rows: list[Row] = []
        self.lengths: list[int] = []
        self.last_tokens: list[int] = []
        self.route_dtype = route_dtype(model)  # a mixture of experts: each fed token's experts kept

    def __len__(self) -> int:
        return len(self.rows)

    def clear(self) -> list[Row]:
        rows = self.rows
        self.rows, self.lengths, self.last_tokens = [], [], []
        self.kv.release()
        return rows

    def step(self, newcomers: list[Row] = ()) -> list[Row]:
        """Sample one token for every live row and the first of each newcomer (who then stay);
        returns the rows that finished, which have left."""
        newcomers = list(newcomers)
        live = len(self.rows)
        fed, copies = self._admit(newcomers)
        tokens = list(self.last_tokens)
        cols = list(self.lengths[:live])
        slots = list(range(live))
        last = list(range(live))  # packed index of each fed row's last token
        for j, (row, start) in enumerate(fed):
            suffix = row.request.prompt_ids[start:]
            tokens += suffix
            cols += range(start, start + len(suffix))
            slots += [live + j] * len(suffix)
            last.append(len(tokens) - 1)
        logits, routes = self._forward(tokens, slots, cols, live, fed, last)
        if routes is not None:
            self._keep_routes(routes, live, fed)
        if copies:  # identical prompts: the fed rows' KV (one copy per layer), then their logits
            sources = [source for source, _ in copies]
            columns = max(self.lengths[source] for source in sources)
            self.kv.move(sources, [target for _, target in copies], columns)
            logits = torch.cat([logits, logits[sources]])
            for source, target in copies:
                self.rows[target].routes = list(self.rows[source].routes)
        rows = self.rows
        sampled, lps = sample(logits.float(), rows)
        for i in range(live):
            self.lengths[i] += 1
        finished, keep = record(rows, sampled, lps)
        self.last_tokens = sampled
        self._store(finished)
        if len(keep) < len(rows):
            self.keep(keep)
        return finished

    def _admit(self, newcomers: list[Row]):
        """Give newcomers slots after the live rows, copy their stored prefixes in; returns
        ([(row, first column to feed)] for rows fed this step, [(source slot, target slot)] for
        rows whose identical prompt another newcomer feeds)."""
        store = self.prefix_store
        fed, repeats, first = [], [], {}
        hits = []
        for row in newcomers:
            row.generator = row_generator(row.request.sampling.seed, self.device)
            start, layers = take_prefix(store, row, self.model, self.route_dtype)
            key = tuple(row.request.prompt_ids) if not start else None
            if key is not None and key in first:
                repeats.append((first[key], row))
                continue
            if key is not None:
                first[key] = row
            fed.append((row, start))
            hits.append((start, layers))
        live = len(self.rows)
        # columns for every prompt and every live row's next token; slots for all rows
        columns = max(
            [len(r.request.prompt_ids) for r in newcomers] + [n + 1 for n in self.lengths]
        )
        self.kv.ensure(live, live + len(newcomers), columns)
        for j, (start, layers) in enumerate(hits):
            if start:
                for (keys, values), (k, v) in zip(self.kv.layers, layers, strict=True):
                    keys[live + j, :, :start] = k[:, :start]
                    values[live + j, :, :start] = v[:, :start]
        slot_of = {id(row): live + j for j, (row, _) in enumerate(fed)}
        copies = [
            (slot_of[id(source)], live + len(fed) + k) for k, (source, _) in enumerate(repeats)
        ]
        self.shared_prompts += len(repeats)
        self.rows = self.rows + [row for row, _ in fed] + [row for _, row in repeats]
        prompt_lengths = [len(row.request.prompt_ids) for row, _ in fed]
        self.lengths = (
            self.lengths + prompt_lengths + [len(r.request.prompt_ids) for _, r in repeats]
        )
        return fed, copies

    def _keep_routes(self, routes, live: int, fed) -> None:
        """Append each row's fed tokens' experts (`routes` [tokens fed, layers, k], live rows'
        one token each first, then each newcomer's prompt suffix)."""
        for i in range(live):
            self.rows[i].routes.append(routes[i : i + 1])
        offset = live
        for row, start in fed:
            n = len(row.request.prompt_ids) - start
            row.routes.append(routes[offset : offset + n])
            offset += n

    def _forward(self, tokens, slots, cols, live: int, fed, last):
        """One packed forward; (logits [live + len(fed), V] at each fed row's last token, each
        fed token's experts [tokens, layers, k] for a mixture of experts, else None)."""
        device = self.device
        groups = []
        if live:
            groups.append(_Group.decoding(cols[:live], device))
        if fed:
            lengths = [len(row.request.prompt_ids) - start for row, start in fed]
            width = max(lengths)
            index = torch.full((len(fed), width), -1, dtype=torch.long)
            query_cols = torch.full((len(fed), width), -1, dtype=torch.long)
            offset = live
            for j, ((_, start), n) in enumerate(zip(fed, lengths, strict=True)):
                index[j, :n] = torch.arange(offset, offset + n)
                query_cols[j, :n] = torch.arange(start, start + n)
                offset += n
            columns = int(query_cols.max()) + 1
            groups.append(_Group(live, index, query_cols, columns, device))
        plan = _Plan(
            self.kv,
            torch.tensor(slots, device=device),
            torch.tensor(cols, device=device),
            groups,
        )
        keep = torch.tensor(last, device=device)
        input_ids = torch.tensor(tokens, device=device)
        position_ids = torch.tensor(cols, device=device)
        extra = {"logits_to_keep": keep} if self.keep_selected_logits else {}
        moe = self.route_dtype is not None
        with moe_replay.routing(self.model) if moe else nullcontext() as capture:
            out = self.model(
                input_ids=input_ids[None],
                position_ids=position_ids[None],
                # a ready 4D mask is used as is: transformers builds none (the plan holds masks)
                attention_mask=self._no_mask,
                use_cache=False,
                mua_slots=plan,
                **extra,
            )
        logits = out.logits[0]
        routes = capture.stacked().to("cpu", self.route_dtype) if moe else None
        return (logits if self.keep_selected_logits else logits[keep]), routes

    def keep(self, keep: list[int]) -> None:
        """Keep only the rows at positions `keep`; the last kept slots fill the holes."""
        if not keep:
            self.clear()
            return
        n, kept = len(keep), set(keep)
        holes = [i for i in range(n) if i not in kept]
        movers = [i for i in keep if i >= n]
        order = [i for i in keep if i < n]
        if holes:
            columns = max(self.lengths[i] for i in movers)
            self.kv.move(movers, holes, columns)
        position = {slot: slot for slot in order}
        position.update(dict(zip(movers, holes, strict=True)))
        new = sorted(keep, key=lambda i: position[i])
        self.rows = [self.rows[i] for i in new]
        self.lengths = [self.lengths[i] for i in new]
        self.last_tokens = [self.last_tokens[i] for i in new]

    def _store(self, finished: list[Row]) -> None:
        """Leave the KV of each finished row's fed tokens in the prefix store (unless its request
        says nothing continues it)."""
        finished = [row for row in finished if row.request.keep_prefix]
        if self.prefix_store is None or not finished:
            return
        slot = {id(r): i for i, r in enumerate(self.rows)}
        for row in finished:
            i = slot[id(row)]
            fed = list(row.request.prompt_ids) + row.token_ids[:-1]
            if self.lengths[i] != len(fed):
                continue
            layers = [
                (keys[i, :, : len(fed)].clone(), values[i, :, : len(fed)].clone())
                for keys, values in self.kv.layers
            ]
            routes = torch.cat(row.routes)[: len(fed)] if row.routes else None
            self.prefix_store.put(row.request.route_key, fed, layers, routes)
