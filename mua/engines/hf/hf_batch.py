"""The `hf` engine's padded batch: rows decoded together over one left-padded KV cache.

`RunningBatch` serves models `hf_slots.SlotBatch` does not (sliding-window layers, other
architectures). `step(newcomers)` runs one decode forward for the live rows and one left-padded
prefill for the newcomers (identical prompts share a row), samples a token per row (`hf_sampling`)
and appends the newcomers' KV; stopped rows leave at once. A mixture of experts' rows keep each
fed token's experts (`Row.routes`; never the padding's). With a `PrefixStore` finishing rows
leave their KV (`hf_prefix`). Merging and prefix reuse need a plain dynamic cache: otherwise
`can_merge` is False. Not here: threads, asyncio, weights (the engine's job).
"""

from __future__ import annotations

from contextlib import nullcontext

from mua.engines.hf.hf_sampling import Row, record, route_dtype, row_generator, sample, take_prefix
from mua.models import moe_replay
from mua.models.model_loading import accepts_logits_to_keep


class RunningBatch:
    """Live rows with their shared KV cache, attention mask [B, W], next positions [B] and the
    last sampled token [B] of each row (sampled, not yet fed to the model)."""

    def __init__(self, model, device, pad_id: int, prefix_store=None):
        self.model = model
        self.prefix_store = prefix_store
        self.device = device
        self.pad_id = pad_id
        self.keep_last_logits_only = accepts_logits_to_keep(model)
        self.can_merge = True  # until a cache that cannot be merged shows up
        self.route_dtype = route_dtype(model)  # a mixture of experts: each fed token's experts kept
        self.shared_prompts = 0  # newcomers whose identical prompt another newcomer fed
        self.rows: list[Row] = []
        self.cache = None
        self.mask = None
        self.next_pos = None
        self.last_tokens = None

    def __len__(self) -> int:
        return len(self.rows)

    def clear(self) -> list[Row]:
        rows, self.rows = self.rows, []
        self.cache = self.mask = self.next_pos = self.last_tokens = None
        return rows

    def step(self, newcomers: list[Row] = ()) -> list[Row]:
        """Sample one token for every live row and the first token of each of `newcomers`, which
        then join; returns the rows that finished (and left).

        Newcomers get a forward of their own (their prompts are long, the live rows feed one token
        each: one right-aligned forward for both would spend the prompt width on every live row),
        and their KV rows are then appended to the live cache."""
        newcomers = list(newcomers)
        if not newcomers or not self.rows:
            return self._forward(newcomers)
        group = RunningBatch(self.model, self.device, self.pad_id, self.prefix_store)
        group.can_merge, group.keep_last_logits_only = self.can_merge, self.keep_last_logits_only
        finished = group._forward(newcomers)
        finished += self._forward([])
        self._absorb(group)
        self.shared_prompts += group.shared_prompts
        return finished

    def _forward(self, newcomers: list[Row]) -> list[Row]:
        """One forward, either a decode step (live rows feed their last sampled token) or a prefill
        into an empty batch (`newcomers` feed their prompt, or the part no stored prefix covers,
        left-padded); one token sampled per row."""
        import torch

        assert not (newcomers and self.rows), "newcomers are prefilled apart from live rows"
        expand = None
        if newcomers:
            cache, input_ids, mask, positions, expand = self._prefill_inputs(newcomers)
            rows = newcomers
        else:  # a decode step: each live row feeds its last sampled token
            cache, rows = self.cache, self.rows
            input_ids, positions = self.last_tokens[:, None], self.next_pos[:, None]
            mask = torch.cat([self.mask, self.mask.new_ones((len(rows), 1))], dim=1)
        extra = {"logits_to_keep": 1} if self.keep_last_logits_only else {}
        moe = self.route_dtype is not None
        with moe_replay.routing(self.model) if moe else nullcontext() as capture:
            out = self.model(
                input_ids=input_ids,
                attention_mask=mask,
                position_ids=positions,
                past_key_values=cache,
                use_cache=True,
                **extra,
            )
        if moe:
            self._keep_routes(rows, capture.stacked(), mask[:, -input_ids.shape[1] :], expand)
        logits = out.logits[:, -1, :]
        if expand is not None:  # identical prompts were prefilled once: one cache row per request
            out.past_key_values.batch_select_indices(expand)
            mask, positions, logits = mask[expand], positions[expand], logits[expand]
        self.rows, self.cache, self.mask = rows, out.past_key_values, mask
        self.next_pos = positions[:, -1] + 1
        if cache is None:
            self.can_merge = _mergeable(self.cache)
        elif input_ids.shape[1] > 1:
            self._compact()  # rows that fed fewer tokens than the widest left masked holes
        tokens, lps = sample(logits.float(), rows)
        finished, keep = record(rows, tokens, lps)
        self._store(rows, finished, self.cache, self.mask)
        self.last_tokens = torch.tensor(tokens, dtype=torch.long, device=self.device)
        if len(keep) < len(rows):
            self.keep(keep)
        return finished

    def keep(self, keep: list[int]) -> None:
        """Keep only the rows at positions `keep` (in order) and trim unused leading columns."""
        import torch

        if not keep:
            self.clear()
            return
        index = torch.tensor(keep, device=self.device)
        self.cache.batch_select_indices(index)
        self.mask, self.next_pos = self.mask[index], self.next_pos[index]
        self.last_tokens = self.last_tokens[index]
        self.rows = [self.rows[i] for i in keep]
        unused = int(self.mask.argmax(dim=1).min())  # the first used column of each row
        if unused > 0 and self.can_merge:
            self.mask = self.mask[:, unused:]
            for layer in self.cache.layers:
                layer.keys, layer.values = layer.keys[:, :, unused:], layer.values[:, :, unused:]

    def _keep_routes(self, rows: list[Row], routes, fed_mask, expand) -> None:
        """Append to each row the experts of the tokens it fed (`routes` [B * T, layers, k] for
        the forward's B rows of T columns; `fed_mask` [B, T] marks the real tokens, not the left
        padding; `expand` maps rows to the forward's rows when identical prompts were fed once)."""
        routes = routes.to("cpu", self.route_dtype)
        routes = routes.reshape(*fed_mask.shape, *routes.shape[1:])
        used = fed_mask.bool().cpu()
        chunks = [routes[b][used[b]] for b in range(len(used))]
        for i, row in enumerate(rows):
            row.routes.append(chunks[int(expand[i]) if expand is not None else i])

    def _store(self, rows: list[Row], finished: list[Row], cache, mask) -> None:
        """Leave the KV of each finished row's fed tokens in the prefix store (unless its request
        says nothing continues it)."""
        import torch

        finished = [row for row in finished if row.request.keep_prefix]
        if self.prefix_store is None or not finished or not self.can_merge or not _mergeable(cache):
            return
        position = {id(r): i for i, r in enumerate(rows)}
        for row in finished:
            i = position[id(row)]
            used = mask[i].bool()
            layers = [(layer.keys[i][:, used], layer.values[i][:, used]) for layer in cache.layers]
            fed = list(row.request.prompt_ids) + row.token_ids[:-1]
            if layers and layers[0][0].shape[1] == len(fed):
                routes = torch.cat(row.routes)[: len(fed)] if row.routes else None
                self.prefix_store.put(row.request.route_key, fed, layers, routes)

    def _prefill_inputs(self, newcomers: list[Row]):
        """(cache, input_ids, mask, positions, expand) for newcomers: the prompt tokens no stored
        prefix covers, left-padded, after the reused prefixes (right-aligned) or no cache at all.

        Without reused prefixes, identical prompts (the n samples of one task) are fed once:
        `expand` [len(newcomers)] then maps each newcomer to its prompt's row (else None)."""
        import torch

        for row in newcomers:
            row.generator = row_generator(row.request.sampling.seed, self.device)
        store = self.prefix_store if self.can_merge else None
        hits = [take_prefix(store, r, self.model, self.route_dtype) for r in newcomers]
        suffixes = [r.request.prompt_ids[n:] for r, (n, _) in zip(newcomers, hits, strict=True)]
        if not any(n for n, _ in hits):
            first: dict[tuple[int, ...], int] = {}
            expand = [first.setdefault(tuple(p), len(first)) for p in suffixes]
            unique = [list(p) for p in first]
            input_ids, new_mask, positions = _left_pad(unique, self.pad_id, self.device)
            if len(unique) == len(suffixes):
                return None, input_ids, new_mask, positions, None
            self.shared_prompts += len(suffixes) - len(unique)
            index = torch.tensor(expand, dtype=torch.long, device=self.device)
            return None, input_ids, new_mask, positions, index
        input_ids, new_mask, positions = _left_pad(suffixes, self.pad_id, self.device)
        from transformers.cache_utils import DynamicCache

        past, past_mask = _stack_prefixes(hits, self.device)
        reused = torch.tensor([n for n, _ in hits], dtype=positions.dtype, device=self.device)
        mask = torch.cat([past_mask, new_mask], dim=1)
        return DynamicCache(ddp_cache_data=past), input_ids, mask, positions + reused[:, None], None

    def _absorb(self, other: RunningBatch) -> None:
        """Append the rows of `other` (with their cache rows, left-padded to one width) to this batch."""
        import torch

        if not other.rows:
            return
        if not self.rows:
            self.rows, self.cache, self.mask = other.rows, other.cache, other.mask
            self.next_pos, self.last_tokens = other.next_pos, other.last_tokens
            return
        width = max(self.mask.shape[1], other.mask.shape[1])
        for mine, theirs in zip(self.cache.layers, other.cache.layers, strict=True):
            mine.keys = torch.cat(
                [_pad_left(mine.keys, width, -2), _pad_left(theirs.keys, width, -2)]
            )
            mine.values = torch.cat(
                [_pad_left(mine.values, width, -2), _pad_left(theirs.values, width, -2)]
            )
        self.mask = torch.cat([_pad_left(self.mask, width, -1), _pad_left(other.mask, width, -1)])
        self.next_pos = torch.cat([self.next_pos, other.next_pos])
        self.last_tokens = torch.cat([self.last_tokens, other.last_tokens])
        self.rows = self.rows + other.rows

    def _compact(self) -> None:
        """Move every row's used cache columns to the right end, in order; drop columns no row uses."""
        import torch

        used = self.mask.bool()
        width = int(used.sum(dim=1).max())
        order = torch.argsort(used.to(torch.int32), dim=1, stable=True)[:, -width:]  # [B, width]
        self.mask = self.mask.gather(1, order)
        index = order[:, None, :, None]
        for layer in self.cache.layers:
            heads, head_dim = layer.keys.shape[1], layer.keys.shape[3]
            layer.keys = layer.keys.gather(2, index.expand(-1, heads, -1, head_dim))
            heads, head_dim = layer.values.shape[1], layer.values.shape[3]
            layer.values = layer.values.gather(2, index.expand(-1, heads, -1, head_dim))


def _mergeable(cache) -> bool:
    from transformers.cache_utils import DynamicLayer

    layers = getattr(cache, "layers", None)
    return bool(layers) and all(type(layer) is DynamicLayer for layer in layers)


def _stack_prefixes(hits, device):
    """Per layer (keys, values) [B, H, W, D] with each row's reused prefix right-aligned, and [B, W] mask."""
    import torch

    width = max(n for n, _ in hits)
    some = next(layers for n, layers in hits if n)
    past_mask = torch.zeros((len(hits), width), dtype=torch.long, device=device)
    past = []
    for layer_index, (k_ref, v_ref) in enumerate(some):
        keys = k_ref.new_zeros((len(hits), k_ref.shape[0], width, k_ref.shape[2]))
        values = v_ref.new_zeros((len(hits), v_ref.shape[0], width, v_ref.shape[2]))
        for i, (n, layers) in enumerate(hits):
            if n:
                keys[i, :, width - n :] = layers[layer_index][0][:, :n]
                values[i, :, width - n :] = layers[layer_index][1][:, :n]
        past.append((keys, values))
    for i, (n, _) in enumerate(hits):
        if n:
            past_mask[i, width - n :] = 1
    return past, past_mask


def _pad_left(t, width: int, dim: int):
    """Zero-pad tensor `t` on the left of dimension `dim` (-1 or -2) up to `width`."""
    import torch.nn.functional as F

    missing = width - t.shape[dim]
    if missing <= 0:
        return t
    return F.pad(t, (missing, 0) if dim == -1 else (0, 0, missing, 0))


def _left_pad(prompts: list[list[int]], pad_id: int, device):
    import torch

    width = max(len(p) for p in prompts)
    input_ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)  # [B, T]
    mask = torch.zeros((len(prompts), width), dtype=torch.long)  # [B, T]
    for i, p in enumerate(prompts):
        input_ids[i, width - len(p) :] = torch.tensor(p, dtype=torch.long)
        mask[i, width - len(p) :] = 1
    positions = (mask.cumsum(-1) - 1).clamp(min=0)  # [B, T]
    return input_ids.to(device), mask.to(device), positions.to(device)
