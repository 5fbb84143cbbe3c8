"""B7: log-probs the hf engine sampled with vs the trainer's recomputation, at step 0 and after a weight push.

Setup, as `mua train` builds it: the policy is tiny:qwen2-1m in fp32 on CPU, sharded with FSDP2
(`mua.dist.fsdp.shard_model`) on a one-process gloo group (`mua.dist.init_distributed`); the
rollout engine is the `hf` engine holding its own copy of the same weights.

1. The engine samples 8 chat prompts (different lengths, so its batch is left-padded) x 4
   samples x up to 32 new tokens at temperature 1, each request in flight at once.
2. The trainer recomputes the log-prob of every sampled token from packed micro-batches
   (`mua.train.micro.forward_only` + `mua.train.packing.token_logprobs`), as the loss does.
3. One optimizer step (`mua.train.sft.sft_step` on the sampled completions, AdamW lr 1e-3 so the
   weights move visibly), then the weights go to the engine in 1 MiB buckets the way the RL step
   pushes them (`mua.train.engine_sync.EngineSync.push`), and 1-2 are repeated.

Metrics: mean |engine log-prob - trainer log-prob| over all sampled tokens, before and after the
push (`mean_abs_logp_diff_step0`, `mean_abs_logp_diff_after_push`), their maxima, and
`stale_engine_logp_diff`: the same figure measured after the step but before the push, which
shows the comparison would catch an engine holding old weights.
Not timed.
"""

from __future__ import annotations

import asyncio

ID = "B7"
BAR = {"mean_abs_logp_diff_step0": "<= 1e-5", "mean_abs_logp_diff_after_push": "<= 1e-5"}

MODEL = "tiny:qwen2-1m"
NUM_PROMPTS, SAMPLES_PER_PROMPT, MAX_NEW_TOKENS = 8, 4, 32
TEMPERATURE = 1.0
STEP_LR = 1e-3
MICRO_BATCH_TOKENS = 4096
PUSH_BUCKET_MB = 1  # small buckets, so the push really goes in several pieces
TOPICS = (
    "a refund",
    "a window seat on the late train",
    "changing the date of my hotel booking",
    "my lost baggage",
    "the cheapest flight to the city next week and a return ticket",
    "cancelling",
    "the price",
    "the arrival station of the night train and the policy for bikes",
)


def prompts(tokenizer) -> list[list[int]]:
    from mua.models import render_ids

    return [
        render_ids(
            tokenizer,
            [
                {"role": "system", "content": "You are a travel agent."},
                {"role": "user", "content": f"Please help me with {topic}."},
            ],
            add_generation_prompt=True,
        )
        for topic in TOPICS[:NUM_PROMPTS]
    ]


def sample(engine, prompt_ids: list[list[int]], stop_id: int, seed: int):
    from mua.rollout.engine import GenerationRequest, SamplingParams

    requests = [
        GenerationRequest(
            prompt_ids=p,
            request_id=f"p{i}s{k}",
            sampling=SamplingParams(
                temperature=TEMPERATURE,
                top_p=1.0,
                top_k=0,
                max_new_tokens=MAX_NEW_TOKENS,
                stop_token_ids=[stop_id],
                seed=seed + 100 * i + k,
            ),
        )
        for i, p in enumerate(prompt_ids)
        for k in range(SAMPLES_PER_PROMPT)
    ]

    async def go():
        return await asyncio.gather(*[engine.generate(r) for r in requests])

    return [r.prompt_ids for r in requests], asyncio.run(go())


def trainer_logprobs(policy, prompts_ids, results, device) -> list[list[float]]:
    """The trainer's log-probs of each completion's tokens, from packed micro-batches."""
    from mua.train.micro import forward_only
    from mua.train.packing import token_logprobs

    seqs = [p + r.token_ids for p, r in zip(prompts_ids, results, strict=True)]
    prompt_lens = [len(p) for p in prompts_ids]

    def per_mb(mb, logits):
        logp = token_logprobs(logits, mb.input_ids, mb.lengths, TEMPERATURE)
        out, start = [], 0
        for i, n in zip(mb.indices, mb.lengths, strict=True):
            out.append(logp[start + prompt_lens[i] : start + n].tolist())
            start += n
        return out

    return forward_only(policy, seqs, MICRO_BATCH_TOKENS, device, per_mb)


def differences(engine_results, recomputed) -> tuple[float, float]:
    diffs = [
        abs(a - b)
        for r, rec in zip(engine_results, recomputed, strict=True)
        for a, b in zip(r.logprobs, rec, strict=True)
    ]
    return sum(diffs) / len(diffs), max(diffs)


def train_one_step(policy, prompts_ids, results, device) -> None:
    from mua.config.train import OptimConfig
    from mua.train.data import SFTSample
    from mua.train.optim import build_optimizer, build_scheduler
    from mua.train.sft import sft_step

    cfg = OptimConfig(lr=STEP_LR)
    optimizer = build_optimizer(policy.parameters(), cfg)
    scheduler = build_scheduler(optimizer, cfg, total_steps=1)
    batch = [
        SFTSample(p + r.token_ids, [0] * len(p) + [1] * len(r.token_ids))
        for p, r in zip(prompts_ids, results, strict=True)
    ]
    sft_step(
        policy,
        optimizer,
        scheduler,
        batch,
        rank=0,
        world_size=1,
        token_budget=MICRO_BATCH_TOKENS,
        grad_clip=cfg.grad_clip,
        device=device,
    )


def run() -> dict[str, float]:
    import torch

    from bench._proc_group import one_process_group
    from mua.dist.fsdp import shard_model
    from mua.models import load_model, load_tokenizer
    from mua.models.tiny import EOS_TOKEN_ID, PAD_TOKEN_ID
    from mua.rollout.hf_engine import HFEngine
    from mua.train.engine_sync import EngineSync

    torch.set_num_threads(2)
    with one_process_group() as dist:
        tokenizer = load_tokenizer(MODEL)
        base = load_model(MODEL, dtype="float32", seed=0)
        engine = HFEngine(base, copy_model=True, pad_token_id=PAD_TOKEN_ID)
        policy = shard_model(base, dist.mesh, mixed_precision="auto")
        prompt_ids = prompts(tokenizer)

        ids0, res0 = sample(engine, prompt_ids, EOS_TOKEN_ID, seed=0)
        step0, step0_max = differences(res0, trainer_logprobs(policy, ids0, res0, dist.device))

        train_one_step(policy, ids0, res0, dist.device)
        ids1, res1 = sample(engine, prompt_ids, EOS_TOKEN_ID, seed=1)
        stale, _ = differences(res1, trainer_logprobs(policy, ids1, res1, dist.device))

        asyncio.run(EngineSync(engine, "hf", policy, PUSH_BUCKET_MB).push())
        ids2, res2 = sample(engine, prompt_ids, EOS_TOKEN_ID, seed=2)
        pushed, pushed_max = differences(res2, trainer_logprobs(policy, ids2, res2, dist.device))
        asyncio.run(engine.close())
    return {
        "mean_abs_logp_diff_step0": step0,
        "mean_abs_logp_diff_after_push": pushed,
        "max_abs_logp_diff_step0": step0_max,
        "max_abs_logp_diff_after_push": pushed_max,
        "stale_engine_logp_diff": stale,
        "sampled_tokens": float(sum(len(r.token_ids) for r in res0 + res2)),
    }
