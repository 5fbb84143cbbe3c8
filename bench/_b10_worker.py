"""One B10 measurement per process (so each peak resident size is its own).

`python -m bench._b10_worker full|lora`: builds B10's model as the trainer runs it on CPU
(varlen attention, the trainer's norms; with `lora`, peft adapters of rank 16 on every linear
layer through `mua.models.lora.add_adapters`), the trainer's optimizer (`build_optimizer`: the
parameters that require gradients), then times one GRPO update (clipped policy loss, token-mean,
backward, AdamW step) through `mua.train.packed_forward.accumulate` on a fixed batch. Prints one
JSON line: {"peak_rss_gb" (the peak resident size during the update, Linux VmHWM reset just
before it), "base_rss_gb" (after imports, before the model), "update_s",
"trainable", "params", "push_bytes" (the bytes of the HTTP bodies a push to SGLang sends, built by
the client's own functions: with `lora`, the `/load_lora_adapter_from_tensors` body of
`rollout.lora_sync: adapter`; else the `/update_weights_from_tensor` bodies of every bucket),
"full_push_bytes" (the full push's bodies), "push_tensor_bytes" (the tensors' own bytes)}.
"""

from __future__ import annotations

import json
import sys
import time

import torch

VOCAB, HIDDEN, LAYERS, HEADS, KV_HEADS, INTERMEDIATE = 32_000, 1024, 6, 16, 8, 2816
SEQUENCES, SEQ_TOKENS, PROMPT_TOKENS = 4, 64, 32
RANK, ALPHA = 16, 32
SEED = 0


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


def rss_gb() -> float:
    return _status_kib("VmRSS") * 1024 / 1e9


def reset_peak() -> None:
    """Start the peak resident size (VmHWM) again from the current size (Linux clear_refs 5)."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def peak_rss_gb() -> float:
    return _status_kib("VmHWM") * 1024 / 1e9


def build_model(lora: bool):
    from bench.common import cpu_trainer_model
    from mua.config.model import LoraConfig
    from mua.models.lora import add_adapters
    from mua.models.tiny import sized_config

    sizes = (VOCAB, HIDDEN, LAYERS, HEADS, KV_HEADS, INTERMEDIATE)
    config = sized_config("qwen3", *sizes, head_dim=HIDDEN // HEADS, max_position_embeddings=4096)
    model = cpu_trainer_model(config, SEED)
    if lora:
        model = add_adapters(model, LoraConfig(rank=RANK, alpha=ALPHA))
    return model


def _nbytes(tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def update(mode: str) -> dict:
    from bench.common import nonzero_grads
    from mua.algo import aggregate, policy_loss
    from mua.config.train import OptimConfig
    from mua.models.lora import adapter_params
    from mua.train.optim import build_optimizer
    from mua.train.packed_batch import concat_per_token, first_token_mask
    from mua.train.packed_forward import accumulate
    from mua.train.trained_model import engine_params

    base = rss_gb()
    model = build_model(mode == "lora")
    optimizer = build_optimizer(model.parameters(), OptimConfig(lr=1e-5))
    gen = torch.Generator().manual_seed(SEED)
    seqs = [
        torch.randint(3, VOCAB, (SEQ_TOKENS,), generator=gen).tolist() for _ in range(SEQUENCES)
    ]
    masks = [[0] * PROMPT_TOKENS + [1] * (SEQ_TOKENS - PROMPT_TOKENS) for _ in seqs]
    advantages = [[1.0 if i % 2 else -1.0] * SEQ_TOKENS for i in range(SEQUENCES)]
    scored = sum(sum(m[1:]) for m in masks)

    def loss_fn(mb, scores):
        logp, entropy = scores
        m = concat_per_token(masks, mb.indices) * first_token_mask(mb.lengths)
        adv = concat_per_token(advantages, mb.indices)
        losses, _ = policy_loss(logp, logp.detach(), adv, m, entropy=entropy)
        return aggregate(losses, m, "token-mean", global_token_count=scored), {}

    before = rss_gb()
    reset_peak()  # the update's own peak: building the model (random init) allocates more
    start = time.perf_counter()
    optimizer.zero_grad(set_to_none=True)
    accumulate(model, seqs, SEQUENCES * SEQ_TOKENS, "cpu", loss_fn, masks=masks)
    optimizer.step()
    seconds = time.perf_counter() - start
    peak = peak_rss_gb()
    trained = nonzero_grads(model)
    named = [(n, p.detach()) for n, p in model.named_parameters()]
    full_push = _full_push_bytes(model, engine_params)
    push = _adapter_push_bytes(model) if mode == "lora" else full_push
    tensor_bytes = _nbytes(t for _, t in (adapter_params(named) if mode == "lora" else named))
    return {
        "peak_rss_gb": peak,
        "base_rss_gb": base,
        "rss_before_update_gb": before,
        "update_s": seconds,
        "trainable": sum(p.numel() for p in model.parameters() if p.requires_grad),
        "params": sum(p.numel() for n, p in named if ".lora_" not in n),
        "push_bytes": push,
        "full_push_bytes": full_push,
        "push_tensor_bytes": tensor_bytes,
        "scored_tokens": scored,
        "nonzero_grads": trained,
    }


def _full_push_bytes(model, engine_params) -> int:
    """Bytes of the `/update_weights_from_tensor` bodies of a full (or merged) push."""
    from mua.engines import weight_buckets
    from mua.engines.sglang import weight_sync
    from mua.engines.sglang.http_bodies import encode_body

    return sum(
        len(encode_body(weight_sync.tensor_push_body(bucket, tp_size=1, flush_cache=False)))
        for bucket in weight_buckets.iter_buckets(engine_params(model), 256.0)
    )


def _adapter_push_bytes(model) -> int:
    """Bytes of the `/load_lora_adapter_from_tensors` body of an adapter push, as EngineSync
    gathers it (`adapter_tensors`) and the SGLang client sends it to the newest release."""
    from mua.engines.sglang import lora_endpoints
    from mua.engines.sglang.http_bodies import encode_body
    from mua.engines.sglang.releases import NEWEST_COVERED, ReleaseTraits
    from mua.models.lora import adapter_config_dict
    from mua.train.engine_sync import adapter_tensors

    body = lora_endpoints.load_body(
        "mua-lora-0",
        list(adapter_tensors(model)),
        adapter_config_dict(model),
        ReleaseTraits.of(NEWEST_COVERED),
        tp_size=1,
    )
    return len(encode_body(body))


if __name__ == "__main__":
    torch.set_num_threads(2)
    print(json.dumps(update(sys.argv[1] if len(sys.argv) > 1 else "full")), flush=True)
