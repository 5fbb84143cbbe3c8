"""The trainer's forward over packed micro-batches: logits, scored log-probs, gradient accumulation.

`packed_logits(model, mb)` runs one packed row (`mua.train.packed_batch`) with per-sequence
attention (`mua_varlen`, or flash-attn's varlen kernel); `scored_forward` returns the scored
tokens' (log-probs [T], entropies [T]) through the chunked LM head (`mua.train.head_scores`).
`accumulate` and `forward_only` run every micro-batch; a rank with fewer runs zero-loss passes on
a dummy row, since every rank must run the same number of passes. `loss_fn(mb, out)` returns an
already normalised loss and stats. Routed-experts records travel with the micro-batches.
Design: docs/training.md. Does not step the optimizer and knows no loss.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import contextmanager

import torch

from mua.distributed import all_reduce_max, all_reduce_sum
from mua.errors import UsageError
from mua.kernels.packed_attention import separates_sequences, shares_prefixes
from mua.models.model_loading import accepts_logits_to_keep
from mua.models.moe_replay import Replay, load_balancing_loss, replaying, routers
from mua.train.head_scores import head_scores
from mua.train.packed_batch import MicroBatch, first_token_mask, pack, plan_micro_batches


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
    return aligned * first_token_mask(lengths, aligned.device)


# ---- scored tokens through the LM head in chunks ---------------------------------------------


@contextmanager
def _head_swapped(head, targets, temperature: float, entropy_grad: bool, captured: list):
    """Make `head(hidden [1, K, H])` return [1, K, 2] (log-prob, entropy) for this call only;
    the entropy off the graph without `entropy_grad`, so the backward does not recompute it."""

    def scores(hidden):
        logp, entropy = head_scores(hidden[0], head.weight, head.bias, targets, temperature)
        entropy = entropy if entropy_grad else entropy.detach()
        out = torch.stack((logp, entropy), dim=-1)[None]  # [1, K, 2]
        captured.append(out)
        return out

    head.forward = scores
    try:
        yield
    finally:
        del head.forward  # the class's forward again


def _post_processes_logits(config) -> bool:
    """True for models that change their head's output before returning it as logits."""
    names = ("final_logit_softcapping", "logit_scale", "logits_scaling", "output_multiplier")
    return any(getattr(config, n, None) not in (None, 1, 1.0) for n in names)


def scored_forward(
    model, mb: MicroBatch, temperature: float = 1.0, entropy_grad: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """Forward one micro-batch packed with masks; (log-probs [T], entropies [T]) of its scored
    tokens at their positions (0 elsewhere), log_softmax(logits / temperature) as the engine
    samples with. The entropy carries gradients only with `entropy_grad` (an entropy bonus)."""
    assert mb.scored is not None, "pack the micro-batch with masks to score selected tokens"
    temperature = temperature if temperature > 0 else 1.0
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    usable = (
        isinstance(head, torch.nn.Linear)
        and accepts_logits_to_keep(model)
        and not _post_processes_logits(getattr(model, "config", None))
    )
    if not usable:
        return scored_logprobs(packed_logits(model, mb), mb, temperature, entropy_grad)
    captured: list = []
    with _head_swapped(head, mb.targets, temperature, entropy_grad, captured):
        out = model(
            input_ids=mb.input_ids,
            position_ids=mb.position_ids,
            use_cache=False,
            logits_to_keep=mb.predictors,
            **mb.attention_kwargs(),
        )
    scores = out.logits
    if len(captured) != 1 or scores.data_ptr() != captured[0].data_ptr():
        raise RuntimeError(
            f"{type(model).__name__} changed its output layer's result; chunked log-probs "
            "cannot be used with it"
        )
    logp, entropy = scores[0, :, 0], scores[0, :, 1]  # [K] each
    if not entropy_grad:
        entropy = entropy.detach()
    zeros = logp.new_zeros(mb.num_tokens)
    return zeros.index_copy(0, mb.scored, logp), zeros.index_copy(0, mb.scored, entropy)


# ---- every micro-batch, in lock-step across ranks --------------------------------------------

LossFn = Callable[[MicroBatch, object], tuple[torch.Tensor, dict[str, float]]]


def accumulate(
    model,
    sequences: list[list[int]],
    token_budget: int,
    device,
    loss_fn: LossFn,
    backward: bool = True,
    masks: list[list[int]] | None = None,
    share_prefixes: bool = False,
    temperature: float = 1.0,
    entropy_grad: bool = False,
    replay: Replay | None = None,
    router_aux_coef: float = 0.0,
) -> list[dict[str, float]]:
    """Forward (and backward) every micro-batch of `sequences`; returns per-micro-batch stats.
    With `masks`, `loss_fn` gets the marked tokens' (log-probs, entropies) at `temperature`
    (the entropy with gradients only with `entropy_grad`), and with `share_prefixes` a prompt
    shared by consecutive sequences is fed once where the model's attention allows it
    (`mua.train.packed_batch.pack`). With `replay` (a mixture of experts' routed-experts
    records) the routers are compared with the records, and follow them when it enforces; with
    `router_aux_coef` > 0 the routers' load-balancing loss times it joins each micro-batch's
    loss, and its share is logged in the stats as `moe/aux_loss` (summed over micro-batches
    and ranks it is the token-weighted mean)."""
    share = share_prefixes and shares_prefixes(model)
    groups = micro_batch_groups(model, sequences, token_budget)
    num_passes = int(all_reduce_max([len(groups)])[0])
    routes = replay.routes if replay is not None else None
    balance = RouterBalance(model, sequences) if router_aux_coef else None
    stats = []
    for k in range(num_passes):
        if k >= len(groups):
            loss = packed_logits(model, pack([[0, 0]], [0], device)).sum() * 0.0
            if backward:
                loss.backward()
            continue
        mb = pack(sequences, groups[k], device, masks, share, routes=routes)
        # the backward inside too: activation checkpointing reruns the routers there
        with replaying(model, mb.routes, replay, keep_logits=balance is not None) as capture:
            if masks is None:
                out = packed_logits(model, mb)
            else:
                out = scored_forward(model, mb, temperature, entropy_grad)
            loss, st = loss_fn(mb, out)
            if balance is not None:
                aux = balance.weighted(capture, mb)
                loss = loss + router_aux_coef * aux
                st["moe/aux_loss"] = float(aux.detach()) / balance.world
            stats.append(st)
            if backward:
                loss.backward()
    return stats


def micro_batch_groups(model, sequences: list[list[int]], token_budget: int) -> list[list[int]]:
    """The sequences' micro-batches: packed up to `token_budget` tokens a row when the model's
    attention keeps a row's sequences apart, else one sequence a row (gpt-oss's eager attention
    with sliding windows and sinks would let a row's later sequences attend to earlier ones)."""
    lengths = [len(s) for s in sequences]
    if separates_sequences(model):
        return plan_micro_batches(lengths, token_budget)
    return [[i] for i in range(len(lengths))]


class RouterBalance:
    """The routers' load-balancing loss of each micro-batch (`moe_replay.load_balancing_loss`),
    weighted by its share of the row tokens over every rank (times the world size, as FSDP
    averages gradients), so its sum over micro-batches and ranks is the token-weighted mean."""

    def __init__(self, model, sequences):
        found = routers(model)
        if not found:
            raise UsageError(
                "algo.router_aux_coef weighs a mixture of experts' load-balancing loss, but the "
                "model has no MoE router; set algo.router_aux_coef=0"
            )
        self.num_experts = int(found[0].num_experts)
        local = sum(len(s) for s in sequences)
        self.total = max(float(all_reduce_sum([local])[0]), 1.0)
        ready = torch.distributed.is_available() and torch.distributed.is_initialized()
        self.world = torch.distributed.get_world_size() if ready else 1

    def weighted(self, capture, mb) -> torch.Tensor:
        aux = load_balancing_loss(capture, self.num_experts)
        return aux * (mb.input_ids.shape[1] / self.total) * self.world


@torch.no_grad()
def forward_only(
    model,
    sequences: list[list[int]],
    token_budget: int,
    device,
    per_mb: Callable[[MicroBatch, torch.Tensor], list],
    masks: list[list[int]] | None = None,
    share_prefixes: bool = False,
    temperature: float = 1.0,
    replay: Replay | None = None,
) -> list:
    """Run `per_mb(mb, out)` (returning one value per sequence) and return values in input order.
    `out`, `masks`, `share_prefixes`, `temperature` and `replay` as in `accumulate`."""
    share = share_prefixes and shares_prefixes(model)
    out: list = [None] * len(sequences)
    groups = micro_batch_groups(model, sequences, token_budget)
    num_passes = int(all_reduce_max([len(groups)])[0])
    routes = replay.routes if replay is not None else None
    for k in range(num_passes):
        if k < len(groups):
            mb = pack(sequences, groups[k], device, masks, share, routes=routes)
            with replaying(model, mb.routes, replay):
                scores = (
                    packed_logits(model, mb)
                    if masks is None
                    else scored_forward(model, mb, temperature)
                )
            values = per_mb(mb, scores)
            for i, v in zip(mb.indices, values):
                out[i] = v
        else:
            packed_logits(model, pack([[0, 0]], [0], device))
    if hasattr(model, "reshard"):  # FSDP2 keeps the root unsharded after a forward without backward
        model.reshard()
    return out
