"""The hf engine's left-padded batch (the path gpt-oss takes) records each fed token's experts:
prompt and sampled tokens, never the left padding, also when identical prompts are fed once and
when a stored prefix is reused (the reused tokens keep their stored experts)."""

from __future__ import annotations

import numpy as np
import torch

from mua.engines.engine_contract import GenerationRequest, SamplingParams
from mua.engines.hf.hf_batch import RunningBatch
from mua.engines.hf.hf_prefix import PrefixStore
from mua.engines.hf.hf_sampling import Row
from mua.models import load_model
from mua.models.moe_replay import no_route, routing

MODEL = "tiny:gptoss-2m"


def _own_routes(model, ids: list[int]) -> np.ndarray:
    """The experts of `ids` fed alone, unpadded: [len(ids), layers, k]."""
    with torch.no_grad(), routing(model) as capture:
        model(input_ids=torch.tensor([ids]))
    return capture.stacked().numpy().astype(np.uint8)


def _generate(batch: RunningBatch, prompts: list[list[int]], key: str = "") -> list[Row]:
    rows = [
        Row(GenerationRequest(p, SamplingParams(max_new_tokens=5, seed=i), route_key=f"{key}{i}"))
        for i, p in enumerate(prompts)
    ]
    pending, done = list(rows), []
    while len(done) < len(rows):
        done += batch.step(pending)
        pending = []
    return rows


def test_the_padded_batch_records_every_fed_token_and_no_padding():
    torch.manual_seed(0)
    model = load_model(MODEL, attn_implementation="sdpa").eval()
    gen = torch.Generator().manual_seed(1)
    short, long = (torch.randint(3, 2000, (n,), generator=gen).tolist() for n in (7, 19))
    batch = RunningBatch(model, "cpu", pad_id=0)
    with torch.no_grad():
        rows = _generate(batch, [short, long, short])  # the two shorts are fed once
    assert batch.shared_prompts == 1
    for row in rows:
        got = row.result().meta["routed_experts"]
        fed = row.request.prompt_ids + row.token_ids[:-1]
        assert got.dtype == np.uint8 and got.shape == (len(fed), 4, 2)
        assert (got == _own_routes(model, fed)).all()


def test_a_reused_prefix_keeps_its_stored_experts():
    """gpt-oss's sliding-window cache cannot be merged (no prefix reuse): a qwen3 MoE in the same
    batch class reuses its first turn's KV and its experts."""
    model = load_model("tiny:qwen3moe-2m", attn_implementation="sdpa").eval()
    store = PrefixStore(max_bytes=1 << 26, min_reuse_tokens=2)
    batch = RunningBatch(model, "cpu", pad_id=0, prefix_store=store)
    prompt = list(range(10, 30))
    with torch.no_grad():
        (first,) = _generate(batch, [prompt], key="t")
        turn = prompt + first.token_ids + [5, 6, 7]
        (second,) = _generate(batch, [turn], key="t")
    assert store.hits == 1
    got = second.result().meta["routed_experts"]
    fed = turn + second.token_ids[:-1]
    assert got.shape[0] == len(fed) and no_route(np.uint8) not in got
    assert (got == _own_routes(model, fed)).all()


def test_the_trainer_follows_a_bf16_engines_gpt_oss_records_and_fails_without():
    """A bfloat16 copy of the model (as a GPU engine runs it) served by the hf engine routes some
    (token, layer) decisions otherwise than the fp32 trainer; with replay the trainer's forward
    sends every recorded one to the engine's experts, without it those stay the router's own."""
    import asyncio
    import copy

    from mua.engines.hf.hf_engine import HFEngine
    from mua.models.moe_replay import Replay, fitted
    from mua.train.packed_forward import forward_only

    torch.set_num_threads(1)
    model = load_model(MODEL, attn_implementation="sdpa", seed=0).eval()
    engine = HFEngine(copy.deepcopy(model).to(torch.bfloat16), max_batch_size=8)
    prompts = [list(range(5 + i, 40 + 3 * i)) for i in range(4)]
    requests = [
        GenerationRequest(p, SamplingParams(max_new_tokens=16, seed=i))
        for i, p in enumerate(prompts)
    ]

    async def run():
        return await asyncio.gather(*(engine.generate(r) for r in requests))

    results = asyncio.run(run())
    seqs = [p + r.token_ids for p, r in zip(prompts, results, strict=True)]
    masks = [[0] * len(p) + [1] * len(r.token_ids) for p, r in zip(prompts, results, strict=True)]
    routes = [fitted(r.meta["routed_experts"], len(s)) for r, s in zip(results, seqs, strict=True)]

    def old_logprobs(enforce: bool) -> Replay:
        replay = Replay(routes, enforce=enforce)
        forward_only(model, seqs, 4096, "cpu", lambda mb, out: [0] * len(mb.indices), masks=masks,
                     replay=replay)  # fmt: skip
        return replay

    off, on = old_logprobs(False), old_logprobs(True)
    recorded = sum(len(s) - 1 for s in seqs) * 4  # every fed (token, layer): all but the last
    assert off.compared == on.compared == recorded
    assert off.differ > 0 and off.unfollowed == off.differ
    assert on.unfollowed == 0
