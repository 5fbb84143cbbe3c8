"""B7: log-probs the engine sampled with vs the trainer's recomputation, at step 0 and after a weight push.

Setup, as `mua train` builds it: the policy is tiny:qwen2-1m in fp32 on CPU, sharded with FSDP2
(`mua.distributed.fsdp.shard_model`) on a one-process gloo group (`mua.distributed.init_distributed`). Each
engine variant starts from a fresh policy (the same seed-0 weights) and runs the same cycle:

1. The engine samples 8 chat prompts (different lengths, so its batch is left-padded) x 4
   samples x up to 32 new tokens at temperature 1, each request in flight at once.
2. The trainer recomputes the log-prob of every sampled token from packed micro-batches
   (`mua.train.packed_forward.forward_only` and `token_logprobs`), as the loss does.
3. One optimizer step (`mua.train.sft.sft_step` on the sampled completions, AdamW lr 1e-3 so the
   weights move visibly), then the weights go to the engine in 1 MiB buckets through
   `mua.train.engine_sync.EngineSync`, and 1-2 are repeated.

Variants (metric suffix):
- none (the original bar keys): the in-process `hf` engine holding its own copy of the weights;
  step 0 samples with that copy, the push is `EngineSync(HFColocated(...)).push()`.
- `_sglang_protocol`: the SGLang-protocol client (`mua.engines.sglang.sglang_engine.SGLangEngine`, built
  by `engine_from_config` from a `rollout.sglang` section with `base_urls`) against a `mua serve`
  subprocess that the benchmark starts on a free 127.0.0.1 port for the same model (fp32, CPU).
  Every use of the engine goes through `EngineSync(SGLangColocated(..., is_leader=True))` as the RL
  step does: wake (resume weights, push because stale, resume KV cache, probe) -> sample ->
  sleep (release all; stale again). So step 0 too samples after a push (of unchanged weights),
  and the probe the trainer relies on to stop a run on a bad push runs before each sampling.
  Weights go as portable safetensors buckets to `/update_weights_from_tensor`.
- `_sglang_protocol_disk`: the same with `weight_path="disk"` (safetensors shards in shared
  memory, then `/update_weights_from_disk`). Both protocol variants share the one server.

Metrics per variant: mean |engine log-prob - trainer log-prob| over all sampled tokens, before and
after the push (`mean_abs_logp_diff_step0`, `mean_abs_logp_diff_after_push`), their maxima,
`stale_engine_logp_diff`: the same figure measured after the step but before the push (protocol
variants: the engine is resumed directly, bypassing `EngineSync`, so nothing is pushed), which
shows the comparison would catch an engine holding old weights, and `sampled_tokens`. Protocol
variants also report `probe_logp_diff` (the largest probe difference `EngineSync` saw) and
`weight_requests` (update requests sent over both pushes: one per bucket on the tensor path, one
per push on the disk path), and fail unless the server loaded every one of them.
Not timed. The server process is stopped however the benchmark ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.common import require_work

ID = "B7"
PROTOCOL_VARIANTS = {"_sglang_protocol": "tensor", "_sglang_protocol_disk": "disk"}  # suffix: path
BAR = {
    f"mean_abs_logp_diff_{when}{suffix}": "<= 1e-5"
    for suffix in ("", *PROTOCOL_VARIANTS)
    for when in ("step0", "after_push")
}

MODEL = "tiny:qwen2-1m"
NUM_PROMPTS, SAMPLES_PER_PROMPT, MAX_NEW_TOKENS = 8, 4, 32
TEMPERATURE = 1.0
STEP_LR = 1e-3
MICRO_BATCH_TOKENS = 4096
PUSH_BUCKET_MB = 1  # small buckets, so the push really goes in several pieces
SERVER_START_TIMEOUT_S = 120.0
REPO = Path(__file__).resolve().parent.parent
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


async def sample_async(engine, prompt_ids: list[list[int]], stop_id: int, seed: int):
    """Every prompt x SAMPLES_PER_PROMPT, all in flight at once; (prompt ids, results) per request."""
    from mua.engines.engine_contract import GenerationRequest, SamplingParams

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

    results = await asyncio.gather(*[engine.generate(r) for r in requests])
    return [r.prompt_ids for r in requests], list(results)


def sample(engine, prompt_ids: list[list[int]], stop_id: int, seed: int):
    return asyncio.run(sample_async(engine, prompt_ids, stop_id, seed))


def trainer_logprobs(policy, prompts_ids, results, device) -> list[list[float]]:
    """The trainer's log-probs of each completion's tokens, from packed micro-batches."""
    from mua.train.packed_forward import forward_only, token_logprobs

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


def variant_metrics(step0, stale, pushed, sampled, suffix: str) -> dict[str, float]:
    """The per-variant figures; each of step0/stale/pushed is (mean, max). Fails (`NoWorkTimed`)
    when nothing was sampled or the training step left the weights as they were (a stale
    engine then agrees with the trainer, and the push would compare nothing)."""
    require_work(
        ID,
        f"variant {suffix or 'hf'}",
        sampled_tokens=sum(len(r.token_ids) for r in sampled),
        stale_engine_logp_diff=stale[0],
    )
    return {
        f"mean_abs_logp_diff_step0{suffix}": step0[0],
        f"mean_abs_logp_diff_after_push{suffix}": pushed[0],
        f"max_abs_logp_diff_step0{suffix}": step0[1],
        f"max_abs_logp_diff_after_push{suffix}": pushed[1],
        f"stale_engine_logp_diff{suffix}": stale[0],
        f"sampled_tokens{suffix}": float(sum(len(r.token_ids) for r in sampled)),
    }


def measure_hf(dist, prompt_ids: list[list[int]], stop_id: int) -> dict[str, float]:
    """The in-process hf engine with its own copy of the weights; push = EngineSync(HFColocated(...))."""
    from mua.distributed.fsdp import shard_model
    from mua.engines.hf.colocated import HFColocated
    from mua.engines.hf.hf_engine import HFEngine
    from mua.models import load_model
    from mua.models.tiny import PAD_TOKEN_ID
    from mua.train.engine_sync import EngineSync

    base = load_model(MODEL, dtype="float32", seed=0)
    engine = HFEngine(base, copy_model=True, pad_token_id=PAD_TOKEN_ID)
    policy = shard_model(base, dist.mesh, mixed_precision="auto")
    try:
        ids0, res0 = sample(engine, prompt_ids, stop_id, seed=0)
        step0 = differences(res0, trainer_logprobs(policy, ids0, res0, dist.device))

        train_one_step(policy, ids0, res0, dist.device)
        ids1, res1 = sample(engine, prompt_ids, stop_id, seed=1)
        stale = differences(res1, trainer_logprobs(policy, ids1, res1, dist.device))

        asyncio.run(EngineSync(HFColocated(engine, PUSH_BUCKET_MB), policy).push())
        ids2, res2 = sample(engine, prompt_ids, stop_id, seed=2)
        pushed = differences(res2, trainer_logprobs(policy, ids2, res2, dist.device))
    finally:
        asyncio.run(engine.close())
    return variant_metrics(step0, stale, pushed, res0 + res2, suffix="")


# ---- the SGLang protocol against `mua serve` ---------------------------------------------------


@contextlib.contextmanager
def mua_serve_process(model: str):
    """`mua serve` for `model` on a free 127.0.0.1 port; yields its URL; always stopped after."""
    from mua.errors import RunFailure

    log_path = Path(tempfile.mkstemp(prefix="mua-b7-serve-", suffix=".log")[1])
    env = {**os.environ, "COLUMNS": "200"}  # the address line must not wrap
    cmd = [sys.executable, "-m", "mua.cli.main", "serve", "--model", model, "--port", "0"]
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=REPO, env=env)
    try:
        deadline = time.monotonic() + SERVER_START_TIMEOUT_S
        while True:
            text = log_path.read_text(errors="replace")
            found = re.search(r"http://127\.0\.0\.1:\d+", text)
            if found:
                break
            if proc.poll() is not None or time.monotonic() > deadline:
                tail = " | ".join(text.strip().splitlines()[-5:])
                raise RunFailure(
                    f"mua serve did not start (exit code {proc.poll()}, log {log_path}): {tail}"
                )
            time.sleep(0.2)
        yield found.group(0)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    log_path.unlink(missing_ok=True)  # kept when anything failed, for reading


def server_weight_requests(url: str) -> int:
    import json
    import urllib.request

    with urllib.request.urlopen(url + "/get_server_info", timeout=30) as resp:
        return int(json.loads(resp.read())["counts"]["weight_requests"])


def protocol_sync(url: str, weight_path: str, policy, hf_config, vocab_size: int):
    """EngineSync for a `rollout.sglang` section pointing at `url`, built as the trainer builds it."""
    from mua.engines.sglang.colocated import SGLangColocated
    from mua.engines.sglang.engine_pool import engine_from_config
    from mua.engines.sglang.settings import SGLangConfig
    from mua.engines.weight_probe import default_probe_ids
    from mua.train.engine_sync import EngineSync

    cfg = SGLangConfig(base_urls=[url], weight_path=weight_path)
    engine = engine_from_config(cfg, MODEL, bucket_mb=PUSH_BUCKET_MB, hf_config=hf_config)
    session = SGLangColocated(
        engine, probe_ids=default_probe_ids(vocab_size), probe_tolerance=cfg.probe_tolerance
    )
    return EngineSync(session, policy)


def sample_in_cycle(sync, prompt_ids, stop_id: int, seed: int):
    """One use of the engine as the RL step makes it: wake (push if stale, probe), sample, sleep."""

    async def go():
        await sync.begin()
        try:
            return await sample_async(sync.engine, prompt_ids, stop_id, seed)
        finally:
            await sync.end()

    return asyncio.run(go())


def sample_stale(engine, prompt_ids, stop_id: int, seed: int):
    """Resume the engine without pushing (bypassing EngineSync) and sample with its old weights."""

    async def go():
        await engine.wake()
        try:
            return await sample_async(engine, prompt_ids, stop_id, seed)
        finally:
            await engine.sleep()

    return asyncio.run(go())


def measure_protocol(
    dist, url: str, weight_path: str, prompt_ids, stop_id: int, suffix: str
) -> dict[str, float]:
    """The SGLang client against `mua serve`, every use of the engine through EngineSync."""
    from mua.distributed.fsdp import shard_model
    from mua.errors import RunFailure
    from mua.models import load_model

    base = load_model(MODEL, dtype="float32", seed=0)
    hf_config, vocab_size = base.config, int(base.config.vocab_size)
    policy = shard_model(base, dist.mesh, mixed_precision="auto")
    sync = protocol_sync(url, weight_path, policy, hf_config, vocab_size)
    pushes_before = server_weight_requests(url)
    try:
        ids0, res0 = sample_in_cycle(sync, prompt_ids, stop_id, seed=0)
        step0 = differences(res0, trainer_logprobs(policy, ids0, res0, dist.device))

        train_one_step(policy, ids0, res0, dist.device)
        sync.mark_stale()
        ids1, res1 = sample_stale(sync.engine, prompt_ids, stop_id, seed=1)
        stale = differences(res1, trainer_logprobs(policy, ids1, res1, dist.device))

        ids2, res2 = sample_in_cycle(sync, prompt_ids, stop_id, seed=2)
        pushed = differences(res2, trainer_logprobs(policy, ids2, res2, dist.device))
        probe = sync.take_metrics()["engine/probe_logp_diff"]
    finally:
        asyncio.run(sync.close())
    received, sent = (
        server_weight_requests(url) - pushes_before,
        sync.engine.stats["weight_buckets"],
    )
    if received != sent or sent < 2:  # at least one request per push, each one loaded
        raise RunFailure(
            f"B7{suffix}: the server loaded {received} weight requests of {sent} sent (2 pushes)"
        )
    out = variant_metrics(step0, stale, pushed, res0 + res2, suffix)
    out[f"probe_logp_diff{suffix}"] = probe
    out[f"weight_requests{suffix}"] = float(sent)
    return out


def run() -> dict[str, float]:
    import torch

    from bench._proc_group import one_process_group
    from mua.models import load_tokenizer
    from mua.models.tiny import EOS_TOKEN_ID

    torch.set_num_threads(2)
    prompt_ids = prompts(load_tokenizer(MODEL))
    metrics: dict[str, float] = {}
    with one_process_group() as dist, mua_serve_process(MODEL) as url:
        metrics.update(measure_hf(dist, prompt_ids, EOS_TOKEN_ID))
        for suffix, weight_path in PROTOCOL_VARIANTS.items():
            metrics.update(
                measure_protocol(dist, url, weight_path, prompt_ids, EOS_TOKEN_ID, suffix)
            )
    return metrics
