"""Packed micro-batches: token sequences grouped by a token budget and laid out as one row each.

A micro-batch is one row: sequences concatenated, no padding and no attention mask, with the
row's boundaries for the forward (`MicroBatch.attention_kwargs`). With masks it records which
tokens are scored and which row positions predict them; with `share_prefixes` a prompt shared by
consecutive sequences is fed once (`shared_layout`; layout: docs/training.md), and `row_of[j]` maps
the j-th token of the unshared sequences to its row position (-1 if left out). Also the losses'
per-token helpers (`concat_per_token`, `first_token_mask`: a sequence's first token has no
log-prob and must be masked). Not here: the forward (`mua.train.packed_forward`), the attention.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class MicroBatch:
    indices: list[int]  # which input sequences, in order
    input_ids: torch.Tensor  # [1, R]: the row fed to the model
    position_ids: torch.Tensor  # [1, R]
    lengths: list[int]  # the sequences' own lengths (per-token values are aligned to these)
    # Set when the caller scores selected tokens (`pack` with masks): `scored` [K] indexes them
    # in the concatenated sequences, `targets` [K] are their ids and `predictors` [K] the row
    # positions whose logits predict them; the forward computes logits only there.
    scored: torch.Tensor | None = None
    targets: torch.Tensor | None = None
    predictors: torch.Tensor | None = None
    # Row segments when they are not the sequences themselves (a shared prefix fed once,
    # `shared_layout`, or last tokens left out); None: one segment per sequence.
    segments: list[int] | None = None
    segment_prefix: list[int] | None = None
    # mixture of experts: each row token's recorded experts [R, layers, k] (-1: no record;
    # `mua.models.moe_replay.row_routes`); None when no sequence has a record
    routes: torch.Tensor | None = None

    @property
    def num_tokens(self) -> int:
        """Tokens of the sequences (what per-token values are aligned to), not of the row."""
        return sum(self.lengths)

    def attention_kwargs(self) -> dict:
        """Segment boundaries for variable-length attention (flash-attn's keyword names), and
        which segments continue a shared prefix (`mua_segment_prefix`, for `mua_varlen`:
        `mua.kernels.packed_attention`)."""
        segments = self.segments if self.segments is not None else self.lengths
        bounds = [0]
        for n in segments:
            bounds.append(bounds[-1] + n)
        cu = torch.tensor(bounds, dtype=torch.int32, device=self.input_ids.device)
        longest = max(segments, default=0)
        out = {
            "cu_seq_lens_q": cu,
            "cu_seq_lens_k": cu,
            "max_length_q": longest,
            "max_length_k": longest,
        }
        if self.segment_prefix is not None:
            out["mua_segment_prefix"] = self.segment_prefix
        return out


def plan_micro_batches(lengths: list[int], token_budget: int) -> list[list[int]]:
    """Greedy, order-preserving groups of sequence indices whose total length fits the budget.

    A sequence longer than the budget gets a micro-batch of its own.
    """
    groups: list[list[int]] = []
    current: list[int] = []
    used = 0
    for i, n in enumerate(lengths):
        if current and used + n > token_budget:
            groups.append(current)
            current, used = [], 0
        current.append(i)
        used += n
    if current:
        groups.append(current)
    return groups


def pack(
    sequences: list[list[int]],
    indices: list[int],
    device: torch.device | str = "cpu",
    masks: list[list[int]] | None = None,
    share_prefixes: bool = False,
    min_shared: int = 16,
    routes: list | None = None,
) -> MicroBatch:
    """One packed row of `sequences[i]` for i in `indices`.

    With `masks` (per-token 0/1, e.g. loss masks) the micro-batch scores the tokens whose mask
    is 1 (never a sequence's first token); with `share_prefixes` too, consecutive sequences that
    begin with the same untrained tokens (at least `min_shared`) feed them once. `routes`:
    per-sequence routed-experts records (mixture of experts), laid out as the row is."""
    lengths = [len(sequences[i]) for i in indices]
    flat = [t for i in indices for t in sequences[i]]
    layout = None
    if masks is not None:
        # Scored tokens are predicted from earlier positions only, so a sequence's last token is
        # never an input to anything scored (no later token of its sequence attends to it): the
        # row leaves it out.
        layout = shared_layout(
            sequences, masks, indices, min_shared if share_prefixes else None, drop_last=True
        )
    if layout is None:
        ids, pos = flat, [p for n in lengths for p in range(n)]
        row_of, segments, segment_prefix = None, None, None
    else:
        ids, pos, row_of = layout.ids, layout.positions, layout.row_of
        segments = layout.segments
        segment_prefix = layout.segment_prefix if layout.shares else None
    mb = MicroBatch(
        indices=list(indices),
        input_ids=torch.tensor([ids], dtype=torch.long, device=device),
        position_ids=torch.tensor([pos], dtype=torch.long, device=device),
        lengths=lengths,
        segments=segments,
        segment_prefix=segment_prefix,
    )
    if routes is not None:
        from mua.models.moe_replay import row_routes

        mb.routes = row_routes(routes, list(indices), lengths, row_of, len(ids))
    if masks is not None:
        flags = concat_per_token(masks, indices) * first_token_mask(lengths)
        scored = flags.nonzero().squeeze(1)
        before = scored - 1  # the same sequence's previous token predicts a scored token
        predictors = torch.tensor(row_of, dtype=torch.long)[before]
        targets = torch.tensor(flat, dtype=torch.long)[scored]
        mb.scored, mb.targets = scored.to(device), targets.to(device)
        mb.predictors = predictors.to(device)
    return mb


def concat_per_token(
    values: list[list[float]] | list[torch.Tensor],
    indices: list[int],
    dtype=torch.float32,
    device: torch.device | str = "cpu",
) -> torch.Tensor:
    """Concatenate per-token values of the chosen sequences into one [T] tensor."""
    parts = [torch.as_tensor(values[i], dtype=dtype) for i in indices]
    return torch.cat(parts).to(device) if parts else torch.zeros(0, dtype=dtype, device=device)


def first_token_mask(lengths: list[int], device="cpu") -> torch.Tensor:
    """1 everywhere except the first token of each sequence."""
    mask = torch.ones(sum(lengths), device=device)
    start = 0
    for n in lengths:
        mask[start] = 0.0
        start += n
    return mask


# ---- row layouts: a shared prefix fed once ---------------------------------------------------


@dataclass
class RowLayout:
    ids: list[int]
    positions: list[int]
    segments: list[int]  # segment lengths, in row order
    segment_prefix: list[int]  # per segment: the index of the prefix segment it continues, or -1
    row_of: list[int]  # row position of each token of the concatenated sequences, or -1

    @property
    def shares(self) -> bool:
        return any(p >= 0 for p in self.segment_prefix)


def shareable_length(seq: list[int], mask: list[int]) -> int:
    """How many leading tokens of `seq` may be shared: up to its first trained token (a token
    other than the first with mask 1), and never the whole sequence."""
    for p in range(1, len(seq)):
        if mask[p]:
            return p
    return len(seq) - 1


def _common_length(a: list[int], b: list[int], limit: int) -> int:
    n = 0
    while n < limit and a[n] == b[n]:
        n += 1
    return n


def shared_layout(
    sequences: list[list[int]],
    masks: list[list[int]],
    indices: list[int],
    min_shared: int | None,
    drop_last: bool = False,
) -> RowLayout:
    """`min_shared` None: no prefix is shared (every sequence is laid out whole). With
    `drop_last`, each sequence's last token (of two or more) stays out of the row (its `row_of`
    entry is -1): a scored token's logits come from the token before it."""
    clusters: list[tuple[int, list[int]]] = []  # (prefix length, member indices)
    for i in indices:
        seq, cap = sequences[i], shareable_length(sequences[i], masks[i])
        if clusters and min_shared is not None:
            prefix, members = clusters[-1]
            first = sequences[members[0]]
            common = _common_length(first, seq, min(prefix, cap))
            if common >= min_shared:
                clusters[-1] = (common, [*members, i])
                continue
        clusters.append((cap, [i]))
    layout = RowLayout([], [], [], [], [])
    for prefix, members in clusters:
        if len(members) == 1:
            seq = sequences[members[0]]
            fed = _fed(seq, drop_last)
            start = len(layout.ids)
            _append(layout, seq[:fed], 0, -1)
            layout.row_of.extend(range(start, start + fed))
            layout.row_of.extend([-1] * (len(seq) - fed))
            continue
        start = len(layout.ids)
        _append(layout, sequences[members[0]][:prefix], 0, -1)
        prefix_segment = len(layout.segments) - 1
        for i in members:
            seq = sequences[i]
            fed = _fed(seq, drop_last)
            own = len(layout.ids)
            if fed > prefix:  # a member whose only own token is its last one feeds nothing
                _append(layout, seq[prefix:fed], prefix, prefix_segment)
            layout.row_of.extend(range(start, start + prefix))
            layout.row_of.extend(range(own, own + fed - prefix))
            layout.row_of.extend([-1] * (len(seq) - fed))
    return layout


def _fed(seq: list[int], drop_last: bool) -> int:
    """How many leading tokens of `seq` go into the row."""
    return len(seq) - 1 if drop_last and len(seq) > 1 else len(seq)


def _append(layout: RowLayout, tokens: list[int], first_position: int, prefix: int) -> None:
    layout.ids.extend(tokens)
    layout.positions.extend(range(first_position, first_position + len(tokens)))
    layout.segments.append(len(tokens))
    layout.segment_prefix.append(prefix)
