"""B9's measurements, one per process (so each peak resident size is its own).

`python -m bench._b9_worker update`: one GRPO update (forward, backward, AdamW step) of B9's
model on one packed micro-batch of 16,384 tokens, 12,000 of them scored, through the trainer's
own pieces (`mua.train.packed_forward.accumulate`, `mua.algo.policy_loss`/`aggregate`); prints
{"peak_rss_gb", "update_s", "scored_tokens", "row_tokens"} as one JSON line.
`python -m bench._b9_worker compare`: on a smaller micro-batch of the same model, the chunked
log-probs and entropies against whole logits (`scored_logprobs`), and their gradients;
prints {"max_abs_logp_diff", "max_abs_entropy_diff", "max_rel_grad_diff"}.
"""

from __future__ import annotations

import json
import resource
import sys
import time

import torch

VOCAB, HIDDEN, LAYERS, HEADS, KV_HEADS, INTERMEDIATE = 151_936, 256, 2, 4, 2, 768
ROW_TOKENS, SCORED_TOKENS = 16_384, 12_000
SMALL_ROW_TOKENS, SMALL_SCORED_TOKENS = 1_024, 750
TURN_TOKENS = 256  # each turn: environment tokens, then the policy's (scored) reply
SEED = 0


def build_model():
    """B9's model, as the trainer runs it on CPU (varlen attention, the trainer's norms)."""

    from bench.common import cpu_trainer_model
    from mua.models.tiny import sized_config

    sizes = (VOCAB, HIDDEN, LAYERS, HEADS, KV_HEADS, INTERMEDIATE)
    config = sized_config("qwen2", *sizes, max_position_embeddings=32_768)
    return cpu_trainer_model(config, SEED)


def conversation(num_tokens: int, num_scored: int) -> tuple[list[int], list[int]]:
    """One conversation of `num_tokens` random ids whose turns end with scored policy tokens,
    `num_scored` in all (spread evenly over the turns)."""
    gen = torch.Generator().manual_seed(SEED)
    ids = torch.randint(3, VOCAB, (num_tokens,), generator=gen).tolist()
    turns = num_tokens // TURN_TOKENS
    mask = [0] * num_tokens
    for t in range(turns):
        scored = num_scored // turns + (1 if t < num_scored % turns else 0)
        end = (t + 1) * TURN_TOKENS if t < turns - 1 else num_tokens
        for i in range(end - scored, end):
            mask[i] = 1
    return ids, mask


def peak_rss_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9  # Linux: KiB


def update() -> dict:
    from bench.common import nonzero_grads
    from mua.algo import aggregate, policy_loss
    from mua.train.packed_batch import concat_per_token, first_token_mask
    from mua.train.packed_forward import accumulate

    model = build_model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
    ids, mask = conversation(ROW_TOKENS, SCORED_TOKENS)
    gen = torch.Generator().manual_seed(SEED + 1)
    advantages = (torch.randint(0, 2, (len(ids),), generator=gen) * 2 - 1).float().tolist()
    scored = sum(mask[1:])

    def loss_fn(mb, scores):
        logp, entropy = scores
        m = concat_per_token([mask], mb.indices) * first_token_mask(mb.lengths)
        adv = concat_per_token([advantages], mb.indices)
        losses, _ = policy_loss(logp, logp.detach(), adv, m, entropy=entropy)
        return aggregate(losses, m, "token-mean", global_token_count=scored), {}

    start = time.perf_counter()
    optimizer.zero_grad(set_to_none=True)
    accumulate(model, [ids], ROW_TOKENS, "cpu", loss_fn, masks=[mask])
    optimizer.step()
    seconds = time.perf_counter() - start
    return {
        "peak_rss_gb": peak_rss_gb(),
        "update_s": seconds,
        "scored_tokens": scored,
        "row_tokens": len(ids),
        "nonzero_grads": nonzero_grads(model),
    }


def compare() -> dict:
    from mua.train.packed_batch import pack
    from mua.train.packed_forward import packed_logits, scored_forward, scored_logprobs

    model = build_model()
    ids, mask = conversation(SMALL_ROW_TOKENS, SMALL_SCORED_TOKENS)
    mb = pack([ids], [0], masks=[mask])

    def run(fn):
        model.zero_grad(set_to_none=True)
        logp, entropy = fn()
        (logp.sum() + 0.1 * entropy.sum()).backward()
        grads = [p.grad.clone() for p in model.parameters() if p.grad is not None]
        return logp.detach(), entropy.detach(), grads

    whole = run(lambda: scored_logprobs(packed_logits(model, mb), mb, 1.0, entropy_grad=True))
    chunked = run(lambda: scored_forward(model, mb, 1.0, entropy_grad=True))
    rel = max(
        float((a - b).abs().max() / b.abs().max().clamp(min=1e-30))
        for a, b in zip(chunked[2], whole[2], strict=True)
    )
    return {
        "max_abs_logp_diff": float((chunked[0] - whole[0]).abs().max()),
        "max_abs_entropy_diff": float((chunked[1] - whole[1]).abs().max()),
        "max_rel_grad_diff": rel,
        "scored_tokens": int(mb.scored.numel()),
    }


if __name__ == "__main__":
    torch.set_num_threads(2)
    mode = sys.argv[1] if len(sys.argv) > 1 else "update"
    print(json.dumps(update() if mode == "update" else compare()), flush=True)
