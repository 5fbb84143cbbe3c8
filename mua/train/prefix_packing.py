"""Row layouts that feed a prefix shared by consecutive sequences once (GRPO's n samples of a task).

`shared_layout` walks a micro-batch's sequences in order and clusters consecutive ones whose
leading tokens are identical and untrained (loss mask 0: the prompt), at least `min_shared` of
them. A cluster is laid out as its prefix followed by each member's remaining tokens; every other
sequence is laid out whole. The row is described by segments: a prefix segment is causal on its
own, a member's segment attends to its cluster's prefix and then causally to itself, with
positions continuing after the prefix, so each token sees exactly the tokens it would see alone.
`row_of[j]` gives the row position of the j-th token of the concatenated (unshared) sequences
(-1 for a last token left out with `drop_last`).

Not here: the attention itself (`mua.train.varlen`), logits and losses (`mua.train.packing`).
"""

from __future__ import annotations

from dataclasses import dataclass


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
