"""Pack token sequences into micro-batches by token budget and compute per-token log-probs.

A micro-batch is one row: sequences concatenated, `position_ids` restarting at 0 for each
sequence, no padding and no attention mask; the forward also gets the sequence boundaries as
`cu_seq_lens_q/k` and `max_length_q/k`. With `share_prefixes`, a prompt shared by consecutive
sequences is fed once (`mua.train.prefix_packing`; `mua_varlen` attention only). Callers that
need only some tokens' log-probs (the trained ones) pass masks: the LM head then runs only on
the positions that predict them, and each sequence's last token, never an input to anything
scored, is left out of the row. Which attention runs on packed rows:
- CPU, or GPU without flash-attn: `mua_varlen` (`mua.train.varlen`): PyTorch sdpa, causal, on each
  sequence's slice of the row, so no token attends across sequences and no [T, T] mask is built
  (verified by tests/unit/test_batching.py: packed log-probs equal per-sequence ones).
- GPU with flash-attn installed and `attn_implementation=flash_attention_2`: flash-attn's varlen
  kernel, with the same boundaries.
Token i's log-prob comes from the logits at i-1 of the same sequence; the first token of each
sequence has none (its value is 0 and it must be masked). Does not know about losses or ranks.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from mua.models.loading import accepts_logits_to_keep
from mua.train.prefix_packing import shared_layout


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
    # `mua.train.prefix_packing`, or last tokens left out); None: one segment per sequence.
    segments: list[int] | None = None
    segment_prefix: list[int] | None = None

    @property
    def num_tokens(self) -> int:
        """Tokens of the sequences (what per-token values are aligned to), not of the row."""
        return sum(self.lengths)

    def attention_kwargs(self) -> dict:
        """Segment boundaries for variable-length attention (flash-attn's keyword names), and
        which segments continue a shared prefix (`mua_segment_prefix`, for `mua_varlen`)."""
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
) -> MicroBatch:
    """One packed row of `sequences[i]` for i in `indices`.

    With `masks` (per-token 0/1, e.g. loss masks) the micro-batch scores the tokens whose mask
    is 1 (never a sequence's first token); with `share_prefixes` too, consecutive sequences that
    begin with the same untrained tokens (at least `min_shared`) feed them once."""
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


def packed_logits(model, mb: MicroBatch) -> torch.Tensor:
    """Forward one packed row; returns logits [R, V] (float32), or [K, V] at `mb.predictors`
    (the logits that predict the K scored tokens) when the micro-batch scores selected tokens."""
    extra = {}
    keep = mb.predictors
    if keep is not None and accepts_logits_to_keep(model):
        extra["logits_to_keep"] = keep  # the LM head runs on those positions only
    out = model(
        input_ids=mb.input_ids,
        position_ids=mb.position_ids,
        use_cache=False,
        **mb.attention_kwargs(),
        **extra,
    )
    # a view, whose backward costs nothing (indexing [0] would zero-fill a [1, K, V] gradient)
    logits = out.logits.squeeze(0)
    if keep is not None and not extra:
        logits = logits[keep]
    return logits.float()


def scored_logprobs(
    logits: torch.Tensor, mb: MicroBatch, temperature: float = 1.0, entropy_grad: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """(log-probs [T], entropies [T]) of the scored tokens from their logits [K, V] (see
    `packed_logits`): log_softmax(logits / T) of each scored token and the entropy of the
    distribution it was drawn from, aligned to token positions, 0 at every other position.
    The entropy carries gradients only with `entropy_grad` (an entropy bonus)."""
    assert mb.scored is not None, "pack the micro-batch with masks to score selected tokens"
    scaled = logits if temperature in (0, 1) else logits / temperature
    logp_all = torch.log_softmax(scaled, dim=-1)  # [K, V]
    picked = logp_all.gather(-1, mb.targets[:, None]).squeeze(-1)  # [K]
    with torch.set_grad_enabled(entropy_grad and torch.is_grad_enabled()):
        entropy = -(logp_all.exp() * logp_all).sum(-1)  # [K]
    zeros = picked.new_zeros(mb.num_tokens)
    return zeros.index_copy(0, mb.scored, picked), zeros.index_copy(0, mb.scored, entropy)


def token_logprobs(
    logits: torch.Tensor, input_ids: torch.Tensor, lengths: list[int], temperature: float = 1.0
) -> torch.Tensor:
    """log_softmax(logits/T) of each actual next token, aligned to token positions: [T].

    Position 0 of every sequence gets 0 (no prediction exists for it).
    """
    ids = input_ids.reshape(-1)  # [T]
    scaled = logits / (temperature if temperature > 0 else 1.0)
    logp_next = (
        torch.log_softmax(scaled[:-1], dim=-1).gather(-1, ids[1:, None]).squeeze(-1)
    )  # [T-1]
    aligned = torch.cat([logp_next.new_zeros(1), logp_next])  # [T]
    return aligned * _not_first_mask(lengths, aligned.device)


def _not_first_mask(lengths: list[int], device) -> torch.Tensor:
    mask = torch.ones(sum(lengths), device=device)
    start = 0
    for n in lengths:
        mask[start] = 0.0
        start += n
    return mask


def first_token_mask(lengths: list[int], device="cpu") -> torch.Tensor:
    """1 everywhere except the first token of each sequence."""
    return _not_first_mask(lengths, device)
