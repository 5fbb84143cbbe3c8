"""Pack token sequences into micro-batches by token budget and compute per-token log-probs.

A micro-batch is one row: sequences concatenated, `position_ids` restarting at 0 for each
sequence, no padding and no attention mask; the forward also gets the sequence boundaries as
`cu_seq_lens_q/k` and `max_length_q/k`. Which attention runs on packed rows:
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


@dataclass
class MicroBatch:
    indices: list[int]  # which input sequences, in order
    input_ids: torch.Tensor  # [1, T]
    position_ids: torch.Tensor  # [1, T]
    lengths: list[int]
    # Row positions of the tokens whose log-probs the caller needs (None: every position); the
    # forward then computes logits only at the positions just before them.
    scored: torch.Tensor | None = None

    @property
    def num_tokens(self) -> int:
        return int(self.input_ids.shape[1])

    def attention_kwargs(self) -> dict:
        """Sequence boundaries for variable-length attention (flash-attn's keyword names)."""
        bounds = [0]
        for n in self.lengths:
            bounds.append(bounds[-1] + n)
        cu = torch.tensor(bounds, dtype=torch.int32, device=self.input_ids.device)
        longest = max(self.lengths, default=0)
        return {
            "cu_seq_lens_q": cu,
            "cu_seq_lens_k": cu,
            "max_length_q": longest,
            "max_length_k": longest,
        }


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
) -> MicroBatch:
    """One packed row of `sequences[i]` for i in `indices`; with `masks` (per-token 0/1, e.g. loss
    masks), `scored` holds the positions whose mask is 1 (never a sequence's first token)."""
    ids: list[int] = []
    pos: list[int] = []
    lengths = []
    for i in indices:
        seq = sequences[i]
        ids.extend(seq)
        pos.extend(range(len(seq)))
        lengths.append(len(seq))
    scored = None
    if masks is not None:
        flags = concat_per_token(masks, indices) * first_token_mask(lengths)
        scored = flags.nonzero().squeeze(1).to(device)
    return MicroBatch(
        indices=list(indices),
        input_ids=torch.tensor([ids], dtype=torch.long, device=device),
        position_ids=torch.tensor([pos], dtype=torch.long, device=device),
        lengths=lengths,
        scored=scored,
    )


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
    """Forward one packed row; returns logits [T, V] (float32), or [K, V] at `mb.scored - 1`
    (the logits that predict the K scored tokens) when the micro-batch has `scored` positions."""
    extra = {}
    keep = None if mb.scored is None else mb.scored - 1
    if keep is not None and accepts_logits_to_keep(model):
        extra["logits_to_keep"] = keep  # the LM head runs on those positions only
    out = model(
        input_ids=mb.input_ids,
        position_ids=mb.position_ids,
        use_cache=False,
        **mb.attention_kwargs(),
        **extra,
    )
    logits = out.logits[0]
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
    picked = logp_all.gather(-1, mb.input_ids[0, mb.scored][:, None]).squeeze(-1)  # [K]
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
