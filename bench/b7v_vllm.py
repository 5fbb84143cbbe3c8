"""B7V: B7 for the vllm engine (log-probs trainer vs a real vLLM server after a push), and vLLM's
rollout throughput against the hf engine's on the same CPU workload.

Agreement: B7's cycle (`bench.b7_logprob_agreement`: tiny:qwen2-1m, tied embeddings, fp32, FSDP2
on a one-process gloo group; 8 chat prompts x 4 samples x up to 32 new tokens at temperature 1),
with the engine a vLLM server launched from the 0.32.0 side venv (`make vllm-releases`) exactly as
`rollout.engine: vllm` launches it (`mua.engines.vllm.vllm_launch.engine_from_config`), every use
through `EngineSync(VLLMColocated(...))`: step 0 samples after a push of the initial weights
(the engine is stale at first), then one optimizer step, a sample with the old weights
(`stale_engine_logp_diff`: the comparison would catch them), the push (1 MiB safetensors files,
loaded by mua's worker extension) and a sample with the pushed weights. `probe_logp_diff` is the
largest difference the probe saw before each sampling.
Throughput: 8 prompts x 8 samples x up to 64 new tokens at temperature 1, all in flight at once,
on the hf engine (in this process, its own copy of the weights) and on the vLLM server, 3 rounds
interleaved after a warm-up; `tokens_per_s_*` are generated tokens over the median round's
seconds, `vllm_over_hf_throughput` their ratio. Both share the machine's cores with whatever else
runs. Skipped (None) when the side venv is missing.
"""

from __future__ import annotations

import asyncio
import socket
import statistics
import tempfile
import time

from bench import b7_logprob_agreement as b7
from bench.common import interleaved_rounds, require_same_work, require_work

ID = "B7V"
RELEASE = "0.32.0"
BAR = {
    "mean_abs_logp_diff_step0_vllm": "<= 1e-5",
    "mean_abs_logp_diff_after_push_vllm": "<= 1e-5",
}
THROUGHPUT_SAMPLES, THROUGHPUT_TOKENS, ROUNDS = 8, 64, 3


def side_python() -> str | None:
    path = b7.REPO / "tests" / ".vllm" / RELEASE / "venv" / "bin" / "python"
    return str(path) if path.is_file() else None


def launch(python: str, tokenizer, model: str = b7.MODEL):
    from mua.engines.vllm.settings import VLLMConfig
    from mua.engines.vllm.vllm_launch import engine_from_config, served_folder

    with socket.socket() as s:  # a free port on 127.0.0.1
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cfg = VLLMConfig(python=python, port=port, extra_args=["--max-model-len", "1024"])
    folder = served_folder(model, 0, tokenizer)
    log_dir = tempfile.mkdtemp(prefix="mua-b7v-")
    engine = engine_from_config(cfg, folder, bucket_mb=b7.PUSH_BUCKET_MB, log_dir=log_dir)
    engine.cleanup.append(folder)  # the preset written as a folder: removed at close
    return engine


def agreement(dist, engine, prompt_ids, stop_id: int) -> dict[str, float]:
    from mua.distributed.fsdp import shard_model
    from mua.engines.vllm.colocated import VLLMColocated
    from mua.engines.weight_probe import default_probe_ids
    from mua.models import load_model
    from mua.train.engine_sync import EngineSync

    base = load_model(b7.MODEL, dtype="float32", seed=0)
    probe_ids = default_probe_ids(int(base.config.vocab_size))
    policy = shard_model(base, dist.mesh, mixed_precision="auto")
    sync = EngineSync(VLLMColocated(engine, probe_ids=probe_ids), policy)
    ids0, res0 = b7.sample_in_cycle(sync, prompt_ids, stop_id, seed=0)
    step0 = b7.differences(res0, b7.trainer_logprobs(policy, ids0, res0, dist.device))

    b7.train_one_step(policy, ids0, res0, dist.device)
    ids1, res1 = b7.sample(engine, prompt_ids, stop_id, seed=1)  # no push yet: old weights
    stale = b7.differences(res1, b7.trainer_logprobs(policy, ids1, res1, dist.device))

    sync.push_weights()  # vllm takes the push right after the update
    ids2, res2 = b7.sample_in_cycle(sync, prompt_ids, stop_id, seed=2)
    pushed = b7.differences(res2, b7.trainer_logprobs(policy, ids2, res2, dist.device))
    out = b7.variant_metrics(step0, stale, pushed, res0 + res2, suffix="_vllm")
    out["probe_logp_diff_vllm"] = sync.take_metrics()["engine/probe_logp_diff"]
    out["pushes_vllm"] = float(engine.stats["pushes"])
    require_work(ID, "pushes", pushes=engine.stats["pushes"] - 1)  # the initial one and one more
    return out


async def _burst(engine, prompt_ids) -> int:
    from mua.engines.engine_contract import GenerationRequest, SamplingParams

    requests = [
        GenerationRequest(
            prompt_ids=p,
            sampling=SamplingParams(temperature=1.0, max_new_tokens=THROUGHPUT_TOKENS, seed=k),
        )
        for p in prompt_ids
        for k in range(THROUGHPUT_SAMPLES)
    ]
    results = await asyncio.gather(*[engine.generate(r) for r in requests])
    return sum(len(r.token_ids) for r in results)


def throughput(engine, prompt_ids) -> dict[str, float]:
    from mua.engines.hf.hf_engine import HFEngine
    from mua.models import load_model
    from mua.models.tiny import PAD_TOKEN_ID

    hf = HFEngine(
        load_model(b7.MODEL, dtype="float32", seed=0), copy_model=True, pad_token_id=PAD_TOKEN_ID
    )
    tokens = {"hf": [], "vllm": []}

    def run(name, eng):
        def go():
            tokens[name].append(asyncio.run(_burst(eng, prompt_ids)))

        return go

    try:
        rounds = interleaved_rounds({"hf": run("hf", hf), "vllm": run("vllm", engine)}, ROUNDS)
    finally:
        asyncio.run(hf.close())
    out = {}
    for name, seconds in rounds.items():
        kept = tokens[name][-ROUNDS:]  # the warm-up round's tokens are not timed
        require_work(ID, f"{name} throughput", tokens=min(kept))
        out[f"tokens_per_s_{name}"] = statistics.median(
            n / s for n, s in zip(kept, seconds, strict=True)
        )
    require_same_work(ID, "requests per round", hf=len(prompt_ids), vllm=len(prompt_ids))
    out["vllm_over_hf_throughput"] = out["tokens_per_s_vllm"] / out["tokens_per_s_hf"]
    return out


def run() -> dict[str, float] | None:
    import torch

    from bench._proc_group import one_process_group
    from mua.models import load_tokenizer
    from mua.models.tiny import EOS_TOKEN_ID

    python = side_python()
    if python is None:
        print(f"B7V: no vLLM {RELEASE} side venv (run `make vllm-releases`); skipped")
        return None
    torch.set_num_threads(2)
    tokenizer = load_tokenizer(b7.MODEL)
    prompt_ids = b7.prompts(tokenizer)
    t0 = time.perf_counter()
    engine = launch(python, tokenizer)
    metrics = {"server_start_s": time.perf_counter() - t0}
    try:
        with one_process_group() as dist:
            metrics.update(agreement(dist, engine, prompt_ids, EOS_TOKEN_ID))
        metrics.update(throughput(engine, prompt_ids))
    finally:
        asyncio.run(engine.close())
    return metrics
