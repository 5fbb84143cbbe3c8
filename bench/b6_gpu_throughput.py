"""B6 (GPU only): training throughput of a Qwen3-0.6B-shaped model on packed 16K-token micro-batches.

Skipped (returns None) without CUDA. The model has Qwen3-0.6B's shape (hidden 1024, 28 layers,
16/8 heads of 128, MLP 3072, vocab 151936, tied embeddings) with random weights, so nothing is
downloaded. It is trained the way `mua train` trains on a GPU: FSDP2 on a one-rank NCCL group with
bf16 compute and fp32 master weights (`mua.distributed.fsdp.shard_model`, mixed_precision=bf16), AdamW
(`mua.train.optim`), and the trainer's step over packed micro-batches of
`parallel.micro_batch_tokens` = 16384 (`mua.train.sft.sft_step`: forward, full-vocab log-probs,
backward, clipping, optimizer step). Attention is flash-attention 2 (varlen over the packed
sequences) when the `flash_attn` package is installed, else PyTorch sdpa.

Each step trains 64 random sequences of 512..3584 tokens (about 4 micro-batches). Reported:
`train_tokens_per_s` = tokens of a step / its seconds, median of 5 steps after 2 warm-up steps,
plus an approximate MFU (6 x parameters x tokens/s over the GPU's dense bf16 peak; attention
FLOPs left out, so it understates). Absolute numbers: this benchmark runs only on a GPU.
"""

from __future__ import annotations

import random
import statistics
import time

from bench.common import require_work

ID = "B6"
BAR = {"train_tokens_per_s": ">= 15000"}

QWEN3_0_6B_SHAPE = dict(
    vocab_size=151936,
    hidden_size=1024,
    intermediate_size=3072,
    num_hidden_layers=28,
    num_attention_heads=16,
    num_key_value_heads=8,
    head_dim=128,
    tie_word_embeddings=True,
    max_position_embeddings=40960,
    rope_theta=1_000_000.0,
    rms_norm_eps=1e-6,
)
MICRO_BATCH_TOKENS = 16384
SEQUENCES_PER_STEP = 64
MIN_LEN, MAX_LEN = 512, 3584
WARMUP_STEPS, TIMED_STEPS = 2, 5
H100_BF16_DENSE_FLOPS = 989e12


def attention_implementation(device_type: str) -> str:
    if device_type != "cuda":
        return "sdpa"
    try:
        import flash_attn  # noqa: F401
    except ImportError:
        return "sdpa"
    return "flash_attention_2"


def build_model(shape: dict, device_type: str):
    import torch
    from transformers import AutoModelForCausalLM, Qwen3Config

    config = Qwen3Config(**shape, bos_token_id=None, eos_token_id=1, pad_token_id=0)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return AutoModelForCausalLM.from_config(
            config, dtype=torch.float32, attn_implementation=attention_implementation(device_type)
        )


def random_batch(vocab_size: int, num_sequences: int, min_len: int, max_len: int, seed: int):
    from mua.train.data import SFTSample

    rng = random.Random(seed)
    batch = []
    for _ in range(num_sequences):
        n = rng.randint(min_len, max_len)
        batch.append(SFTSample([rng.randrange(vocab_size) for _ in range(n)], [1] * n))
    return batch


def measure(
    shape: dict,
    *,
    token_budget: int,
    num_sequences: int,
    min_len: int,
    max_len: int,
    warmup_steps: int,
    timed_steps: int,
    activation_checkpointing: bool = False,
) -> dict[str, float]:
    """Train `warmup_steps + timed_steps` steps; median tokens/s of the timed ones."""
    import torch

    from bench._proc_group import one_process_group
    from mua.config.train import OptimConfig
    from mua.distributed.fsdp import shard_model
    from mua.train.optim import build_optimizer, build_scheduler
    from mua.train.sft import sft_step

    with one_process_group() as dist:
        model = build_model(shape, dist.device.type)
        num_params = sum(p.numel() for p in model.parameters())
        model = shard_model(
            model,
            dist.mesh,
            mixed_precision="bf16" if dist.device.type == "cuda" else "fp32",
            activation_checkpointing=activation_checkpointing,
        )
        cfg = OptimConfig()
        optimizer = build_optimizer(model.parameters(), cfg)
        scheduler = build_scheduler(optimizer, cfg, total_steps=warmup_steps + timed_steps)
        rates, tokens = [], 0.0
        for step in range(warmup_steps + timed_steps):
            batch = random_batch(shape["vocab_size"], num_sequences, min_len, max_len, seed=step)
            if dist.device.type == "cuda":
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            out = sft_step(
                model,
                optimizer,
                scheduler,
                batch,
                rank=0,
                world_size=1,
                token_budget=token_budget,
                grad_clip=cfg.grad_clip,
                device=dist.device,
            )
            if dist.device.type == "cuda":
                torch.cuda.synchronize()
            seconds = time.perf_counter() - t0
            require_work(ID, f"step {step}", trained_tokens=out["tokens/total"])
            if step >= warmup_steps:
                rates.append(out["tokens/total"] / seconds)
                tokens = out["tokens/total"]
        peak_gib = torch.cuda.max_memory_allocated() / 2**30 if dist.device.type == "cuda" else 0.0
    tokens_per_s = statistics.median(rates)
    return {
        "train_tokens_per_s": tokens_per_s,
        "approx_mfu": 6 * num_params * tokens_per_s / H100_BF16_DENSE_FLOPS,
        "tokens_per_step": tokens,
        "parameters": float(num_params),
        "peak_memory_gib": peak_gib,
    }


def run():
    import torch

    if not torch.cuda.is_available():
        return None
    settings = {
        "token_budget": MICRO_BATCH_TOKENS,
        "num_sequences": SEQUENCES_PER_STEP,
        "min_len": MIN_LEN,
        "max_len": MAX_LEN,
        "warmup_steps": WARMUP_STEPS,
        "timed_steps": TIMED_STEPS,
    }
    try:
        return measure(QWEN3_0_6B_SHAPE, **settings)
    except torch.cuda.OutOfMemoryError:
        torch.cuda.empty_cache()
        metrics = measure(QWEN3_0_6B_SHAPE, **settings, activation_checkpointing=True)
        metrics["activation_checkpointing"] = 1.0
        return metrics
