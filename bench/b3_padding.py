"""B3: padding waste of the trainer's packed micro-batches on a multi-turn batch (lengths vary 10x).

Workload: 64 multi-turn conversations (1 to 12 user/assistant exchanges each, so the longest is
about 10x the shortest), rendered with the tiny tokenizer's chat template into token ids plus an
assistant-only loss mask (`mua.train.data.render_assistant_mask`), then one real training step
through the trainer's step function (`mua.train.sft.sft_step`: packing into micro-batches of
`parallel.micro_batch_tokens` = 4096 tokens, gradient accumulation, optimizer step) on
tiny:qwen2-1m, fp32, CPU. A forward pre-hook on the model counts every token the model actually
computes, so the figure is what the trainer ran, not what the packing plan promises.

padding_fraction = (tokens computed - input tokens of the conversations) / tokens computed, where a
conversation's input tokens are all but its last: the trainer scores tokens from the positions
before them, so it never feeds a sequence's last token (`mua.train.packed_batch.pack`).
For context, also reported: the fraction a pad-to-longest [rows, max_len] layout would waste on
the same batch (8 rows per micro-batch, batch order), and how full the micro-batches are
(`budget_fill`: conversation tokens / (micro-batches x budget)).

One process, no process group: the dummy passes that keep ranks in lock-step when their
micro-batch counts differ do not occur here (they are 2 tokens each when they do).
Not timed: this benchmark counts tokens, it does not measure speed.
"""

from __future__ import annotations

import random

from bench.common import require_same_work, require_work

ID = "B3"
BAR = {"padding_fraction": "<= 0.05"}

MODEL = "tiny:qwen2-1m"
NUM_CONVERSATIONS = 64
MIN_EXCHANGES, MAX_EXCHANGES = 1, 12
MICRO_BATCH_TOKENS = 4096  # the recipe default (`parallel.micro_batch_tokens`)
PADDED_ROWS_PER_MICRO_BATCH = 8
WORDS = (
    "flight booking seat window refund order city hotel night price ticket change date "
    "cancel policy account number baggage train station arrival return"
).split()


def _sentence(rng: random.Random, num_words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(num_words)) + "."


def conversations(seed: int = 0) -> list[list[dict]]:
    """Multi-turn chats whose number of exchanges is spread evenly over 1..12."""
    rng = random.Random(seed)
    out = []
    for i in range(NUM_CONVERSATIONS):
        num_exchanges = MIN_EXCHANGES + i % (MAX_EXCHANGES - MIN_EXCHANGES + 1)
        messages = [{"role": "system", "content": "You are a helpful travel agent."}]
        for _ in range(num_exchanges):
            messages.append({"role": "user", "content": _sentence(rng, 12)})
            messages.append({"role": "assistant", "content": _sentence(rng, 16)})
        out.append(messages)
    rng.shuffle(out)
    return out


def pad_to_longest_fraction(lengths: list[int], rows: int) -> float:
    padded = sum(
        max(lengths[i : i + rows]) * len(lengths[i : i + rows])
        for i in range(0, len(lengths), rows)
    )
    return 1.0 - sum(lengths) / padded


def run() -> dict[str, float]:
    import torch

    from mua.config.train import OptimConfig
    from mua.models import load_model, load_tokenizer
    from mua.train.data import render_assistant_mask
    from mua.train.optim import build_optimizer, build_scheduler
    from mua.train.packed_batch import plan_micro_batches
    from mua.train.sft import sft_step

    torch.set_num_threads(2)
    tokenizer = load_tokenizer(MODEL)
    samples = [render_assistant_mask(tokenizer, chat) for chat in conversations()]
    lengths = [len(s.token_ids) for s in samples]
    model = load_model(MODEL, dtype="float32", seed=0)
    optim_cfg = OptimConfig()
    optimizer = build_optimizer(model.parameters(), optim_cfg)
    scheduler = build_scheduler(optimizer, optim_cfg, total_steps=1)

    computed = []

    def count_tokens(_module, args, kwargs):
        ids = kwargs.get("input_ids", args[0] if args else None)
        computed.append(int(ids.numel()))

    hook = model.register_forward_pre_hook(count_tokens, with_kwargs=True)
    try:
        metrics = sft_step(
            model,
            optimizer,
            scheduler,
            samples,
            rank=0,
            world_size=1,
            token_budget=MICRO_BATCH_TOKENS,
            grad_clip=optim_cfg.grad_clip,
            device="cpu",
        )
    finally:
        hook.remove()
    require_work(ID, "the SFT step", forward_tokens=sum(computed), trained=metrics["tokens/total"])
    require_same_work(ID, "tokens", trained=metrics["tokens/total"], workload=sum(lengths))
    num_micro_batches = len(plan_micro_batches(lengths, MICRO_BATCH_TOKENS))
    inputs = sum(n - 1 if n > 1 else n for n in lengths)
    return {
        "padding_fraction": (sum(computed) - inputs) / sum(computed),
        "pad_to_longest_fraction": pad_to_longest_fraction(lengths, PADDED_ROWS_PER_MICRO_BATCH),
        "length_spread": max(lengths) / min(lengths),
        "micro_batches": float(len(computed)),
        "budget_fill": sum(lengths) / (num_micro_batches * MICRO_BATCH_TOKENS),
        "tokens": float(sum(lengths)),
    }
