"""The hf engine: log-probs equal a trainer-style recomputation, dynamic batching, stops, budgets,
seeds, weight updates, and a responsive event loop while it generates."""

from __future__ import annotations

import asyncio
import time

import pytest
import torch

from mua.engines.engine_contract import GenerationRequest, SamplingParams
from mua.engines.hf.hf_engine import HFEngine
from mua.models import load_model

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def model():
    return load_model("tiny:qwen3-1m", dtype="float32", seed=0)


def request(prompt, **sampling) -> GenerationRequest:
    return GenerationRequest(prompt_ids=list(prompt), sampling=SamplingParams(**sampling))


def run_all(engine, requests):
    async def go():
        return await asyncio.gather(*[engine.generate(r) for r in requests])

    return asyncio.run(go())


def recompute_logprobs(model, prompt, sampled, temperature):
    """What the trainer does: one forward pass over the finished sequence, log_softmax(logits / T)."""
    ids = torch.tensor([list(prompt) + list(sampled)])
    with torch.no_grad():
        logits = model(ids).logits[0].float()  # [T, V]
    t = temperature if temperature > 0 else 1.0
    logp = torch.log_softmax(logits / t, dim=-1)
    start = len(prompt) - 1
    return [logp[start + k, tok].item() for k, tok in enumerate(sampled)]


@pytest.mark.parametrize("temperature,top_p,top_k", [(1.0, 1.0, 0), (0.7, 0.9, 50), (0.0, 1.0, 0)])
def test_sampling_logprobs_match_trainer_recomputation(model, temperature, top_p, top_k):
    engine = HFEngine(model)
    prompts = [
        list(range(10 + 3 * i, 30 + 11 * i)) for i in range(6)
    ]  # different lengths: left padding
    reqs = [
        request(
            p, temperature=temperature, top_p=top_p, top_k=top_k, max_new_tokens=12 + 4 * i, seed=i
        )
        for i, p in enumerate(prompts)
    ]
    results = run_all(engine, reqs)
    assert engine.stats["batches"] == 1 and engine.stats["largest_batch"] == 6
    for r, res in zip(reqs, results, strict=False):
        assert len(res.token_ids) == len(res.logprobs) == r.sampling.max_new_tokens
        assert res.finish_reason == "length"
        ref = recompute_logprobs(model, r.prompt_ids, res.token_ids, temperature)
        assert max(abs(a - b) for a, b in zip(ref, res.logprobs, strict=False)) < 1e-5


def test_greedy_is_deterministic_and_independent_of_batch_mates(model):
    engine = HFEngine(model)
    prompt = list(range(40, 60))
    alone = run_all(engine, [request(prompt, temperature=0.0, max_new_tokens=16)])[0]
    mates = [request(list(range(5, 5 + n)), temperature=1.0, max_new_tokens=8) for n in (3, 30, 9)]
    batched = run_all(engine, [request(prompt, temperature=0.0, max_new_tokens=16), *mates])[0]
    assert alone.token_ids == batched.token_ids


def test_seeded_sampling_repeats(model):
    engine = HFEngine(model)
    a = run_all(engine, [request([5, 6, 7], temperature=1.0, max_new_tokens=20, seed=11)])[0]
    b = run_all(engine, [request([5, 6, 7], temperature=1.0, max_new_tokens=20, seed=11)])[0]
    c = run_all(engine, [request([5, 6, 7], temperature=1.0, max_new_tokens=20, seed=12)])[0]
    assert a.token_ids == b.token_ids and a.token_ids != c.token_ids


def test_stop_tokens_end_a_request_and_are_kept(model):
    engine = HFEngine(model)
    probe = run_all(engine, [request([9, 8, 7], temperature=0.0, max_new_tokens=10)])[0]
    stop = probe.token_ids[3]
    first = probe.token_ids.index(stop)
    res = run_all(
        engine, [request([9, 8, 7], temperature=0.0, max_new_tokens=10, stop_token_ids=[stop])]
    )[0]
    assert res.finish_reason == "stop"
    assert res.token_ids == probe.token_ids[: first + 1]
    assert res.token_ids[-1] == stop and len(res.logprobs) == len(res.token_ids)


def test_requests_arriving_during_a_batch_join_it_between_decode_steps(model):
    engine = HFEngine(model)

    async def go():
        first = [
            asyncio.ensure_future(
                engine.generate(request([1, 2, 3], temperature=1.0, max_new_tokens=200))
            )
            for _ in range(3)
        ]
        while engine.stats["steps"] < 3:  # the first group is decoding in the serving thread now
            await asyncio.sleep(0.001)
        ticks = 0
        later = [
            asyncio.ensure_future(
                engine.generate(
                    request(list(range(4, 40 + 7 * i)), temperature=1.0, max_new_tokens=5, seed=i)
                )
            )
            for i in range(4)
        ]
        while not all(f.done() for f in later):
            ticks += 1  # the event loop keeps running while the engine generates
            await asyncio.sleep(0.001)
        first_done_early = sum(f.done() for f in first)
        await asyncio.gather(*first)
        return ticks, first_done_early, [f.result() for f in later], [f.result() for f in first]

    ticks, first_done_early, later, first = asyncio.run(go())
    assert first_done_early == 0  # the short requests did not wait for the long ones to end
    assert engine.stats["requests"] == 7 and engine.stats["batches"] == 2
    assert engine.stats["largest_batch"] == 7
    assert ticks > 5
    for i, res in enumerate(later):  # joining a running batch keeps log-probs exact
        prompt = list(range(4, 40 + 7 * i))
        ref = recompute_logprobs(model, prompt, res.token_ids, 1.0)
        assert max(abs(a - b) for a, b in zip(ref, res.logprobs, strict=True)) < 1e-5
    for res in first:  # so do the rows the newcomers were merged into
        assert len(res.token_ids) == 200
        ref = recompute_logprobs(model, [1, 2, 3], res.token_ids, 1.0)
        assert max(abs(a - b) for a, b in zip(ref, res.logprobs, strict=True)) < 1e-5


def test_update_weights_changes_outputs_and_accepts_buckets(model):
    engine = HFEngine(model)
    snapshot = model.state_dict()["model.embed_tokens.weight"].clone()
    prompt = list(range(20, 40))
    before = run_all(engine, [request(prompt, temperature=0.0, max_new_tokens=8)])[0]
    other = load_model("tiny:qwen3-1m", dtype="float32", seed=1)
    named = list(other.state_dict().items())
    buckets = [named[i : i + 5] for i in range(0, len(named), 5)]
    asyncio.run(engine.update_weights(buckets))
    after = run_all(engine, [request(prompt, temperature=0.0, max_new_tokens=8)])[0]
    expected = run_all(HFEngine(other), [request(prompt, temperature=0.0, max_new_tokens=8)])[0]
    assert after.token_ids == expected.token_ids and after.token_ids != before.token_ids
    # The engine holds its own copy: the model it was built from is untouched.
    assert torch.equal(model.state_dict()["model.embed_tokens.weight"], snapshot)
    assert not torch.equal(
        model.state_dict()["model.embed_tokens.weight"],
        other.state_dict()["model.embed_tokens.weight"],
    )
    with pytest.raises(ValueError, match="no weight named"):
        asyncio.run(engine.update_weights({"nope.weight": torch.zeros(1)}))
    with pytest.raises(ValueError, match="shape"):
        asyncio.run(engine.update_weights([("model.norm.weight", torch.zeros(3))]))


def test_sleep_wake_and_zero_budget(model):
    engine = HFEngine(model)

    async def go():
        await engine.sleep()
        with pytest.raises(RuntimeError, match="asleep"):
            await engine.generate(request([1, 2], max_new_tokens=3))
        await engine.wake()
        empty = await engine.generate(request([1, 2], max_new_tokens=0))
        ok = await engine.generate(request([1, 2], max_new_tokens=3))
        await engine.close()
        return empty, ok

    empty, ok = asyncio.run(go())
    assert empty.token_ids == [] and empty.finish_reason == "length"
    assert len(ok.token_ids) == 3


@pytest.mark.parametrize("slot_batching", [True, False])
def test_concurrent_requests_share_forward_passes(model, slot_batching):
    """16 concurrent requests are decoded together: each forward of the engine's model gives
    every live request its next token, so the burst costs the forward passes of ONE request,
    where one request at a time costs 16 times as many. Counted at the model, not timed."""
    num, new_tokens = 16, 24
    engine = HFEngine(model, slot_batching=slot_batching)
    fed: list[int] = []  # tokens fed to the model, one entry per forward

    def count(module, args, kwargs):
        fed.append(kwargs["input_ids"].numel())

    engine.model.register_forward_pre_hook(count, with_kwargs=True)
    reqs = [
        request(list(range(10, 40)), temperature=1.0, max_new_tokens=new_tokens, seed=i)
        for i in range(num)
    ]
    for r in reqs:
        run_all(engine, [r])
    sequential = len(fed)
    fed.clear()
    results = run_all(engine, reqs)
    assert all(len(res.token_ids) == new_tokens for res in results)
    assert sequential == num * new_tokens
    # one forward per generated position: the prompts' prefill samples the first token, then
    # every decode forward feeds the last token of all 16 rows at once
    assert len(fed) == new_tokens, fed
    assert fed[1:] == [num] * (new_tokens - 1), fed


def test_next_turn_reuses_the_previous_turns_kv_and_stays_exact(model):
    engine = HFEngine(model)
    turn1 = [
        request(list(range(10, 30 + 5 * i)), temperature=1.0, max_new_tokens=6 + i, seed=i)
        for i in range(3)
    ]
    for i, r in enumerate(turn1):
        r.route_key = f"traj{i}"
    first = run_all(engine, turn1)
    assert engine.stats["prefix_hits"] == 0
    reply = [101, 102, 103, 104]  # the environment's answer, appended like a chat template would
    turn2 = [
        request(
            r.prompt_ids + res.token_ids + reply[: 2 + i],
            temperature=1.0,
            max_new_tokens=8,
            seed=10 + i,
        )
        for i, (r, res) in enumerate(zip(turn1, first, strict=True))
    ]
    turn2.append(
        request(list(range(50, 70)), temperature=1.0, max_new_tokens=8, seed=99)
    )  # no stored prefix
    for i, r in enumerate(turn2[:3]):
        r.route_key = f"traj{i}"
    second = run_all(engine, turn2)
    assert engine.stats["prefix_hits"] == 3
    fed_before = sum(
        len(r.prompt_ids) + len(res.token_ids) - 1 for r, res in zip(turn1, first, strict=True)
    )
    assert engine.stats["prefix_tokens_reused"] == fed_before
    for r, res in zip(turn2, second, strict=True):
        ref = recompute_logprobs(model, r.prompt_ids, res.token_ids, 1.0)
        assert max(abs(a - b) for a, b in zip(ref, res.logprobs, strict=True)) < 1e-5
    # the same requests without any stored prefix sample the same tokens (same seeds)
    fresh = run_all(
        HFEngine(model, prefix_cache_mb=0),
        [
            request(r.prompt_ids, temperature=1.0, max_new_tokens=8, seed=r.sampling.seed)
            for r in turn2
        ],
    )
    assert [f.token_ids for f in fresh] == [s.token_ids for s in second]


@pytest.mark.parametrize("slot_batching", [True, False])
def test_a_request_nothing_continues_leaves_no_prefix(model, slot_batching):
    engine = HFEngine(model, slot_batching=slot_batching)
    last, more = (request(list(range(10, 40)), temperature=0.0, max_new_tokens=4) for _ in range(2))
    last.route_key, last.keep_prefix = "last", False
    more.route_key = "more"
    run_all(engine, [last, more])
    assert len(engine.prefixes) == 1 and engine.prefixes.take("last", last.prompt_ids) == (0, None)


def test_weight_updates_drop_stored_prefixes(model):
    engine = HFEngine(model)
    req = request(list(range(10, 40)), temperature=0.0, max_new_tokens=4)
    req.route_key = "t"
    res = run_all(engine, [req])[0]
    assert len(engine.prefixes) == 1
    asyncio.run(engine.update_weights(list(model.state_dict().items())[:1]))
    assert len(engine.prefixes) == 0
    nxt = request(req.prompt_ids + res.token_ids + [7, 8], temperature=0.0, max_new_tokens=4)
    nxt.route_key = "t"
    run_all(engine, [nxt])
    assert engine.stats["prefix_hits"] == 0


def test_a_turn_with_a_stored_prefix_joins_a_running_batch_exactly(model):
    engine = HFEngine(model)
    first_turn = request(list(range(10, 35)), temperature=1.0, max_new_tokens=5, seed=1)
    first_turn.route_key = "traj"
    done = run_all(engine, [first_turn])[0]
    second_turn = request(
        first_turn.prompt_ids + done.token_ids + [201, 202, 203],
        temperature=1.0,
        max_new_tokens=6,
        seed=2,
    )
    second_turn.route_key = "traj"

    async def go():
        long_one = asyncio.ensure_future(
            engine.generate(request([3, 4, 5], temperature=1.0, max_new_tokens=60, seed=3))
        )
        while engine.stats["steps"] < 10:
            await asyncio.sleep(0.001)
        joined = await engine.generate(second_turn)
        return joined, await long_one

    joined, long_one = asyncio.run(go())
    assert engine.stats["prefix_hits"] == 1 and engine.stats["largest_batch"] == 2
    for prompt, res in ((second_turn.prompt_ids, joined), ([3, 4, 5], long_one)):
        ref = recompute_logprobs(model, prompt, res.token_ids, 1.0)
        assert max(abs(a - b) for a, b in zip(ref, res.logprobs, strict=True)) < 1e-5


def test_identical_prompts_are_prefilled_once_and_sampled_independently(model):
    """The n samples of a task share one prefill row; each keeps its own seed and exact log-probs
    (two groups of different prompt lengths: their KV is copied to the other samples at once)."""
    engine = HFEngine(model)
    shared, other = list(range(20, 45)), list(range(50, 60))
    reqs = [request(shared, temperature=1.0, max_new_tokens=10, seed=i) for i in range(4)]
    reqs += [request(other, temperature=1.0, max_new_tokens=10, seed=9 + i) for i in range(2)]
    results = run_all(engine, reqs)
    assert engine.stats["shared_prompts"] == 4
    assert len({tuple(r.token_ids) for r in results[:4]}) > 1  # not copies of one sample
    for r, res in zip(reqs, results, strict=True):
        alone = run_all(HFEngine(model), [r])[0]
        assert alone.token_ids == res.token_ids
        ref = recompute_logprobs(model, r.prompt_ids, res.token_ids, 1.0)
        assert max(abs(a - b) for a, b in zip(ref, res.logprobs, strict=True)) < 1e-5


def test_serve_while_serves_on_the_calling_thread(model):
    """`serve_while` runs the caller's event loop in a helper thread and decodes on this one."""
    import threading

    engine = HFEngine(model)
    threads = set()
    embeddings = engine.model.get_input_embeddings()  # called by every forward, lean or not
    hook = embeddings.register_forward_pre_hook(lambda *_: threads.add(threading.get_ident()))
    reqs = [
        request(list(range(5, 15 + i)), temperature=1.0, max_new_tokens=6, seed=i) for i in range(3)
    ]
    try:
        served = engine.serve_while(lambda: run_all(engine, reqs))
    finally:
        hook.remove()
    assert threads == {threading.get_ident()}
    assert [r.token_ids for r in served] == [r.token_ids for r in run_all(HFEngine(model), reqs)]
    with pytest.raises(ValueError, match="boom"):  # the caller's exception reaches this thread
        engine.serve_while(lambda: (_ for _ in ()).throw(ValueError("boom")))


def test_serve_while_runs_first_before_serving_any_request(model):
    """A weight push given as `first` overlaps with the caller queuing its requests, and every
    request is sampled with the pushed weights (none starts while the push is under way, even
    between its buckets)."""
    other = load_model("tiny:qwen3-1m", dtype="float32", seed=1)
    engine = HFEngine(model)
    reqs = [
        request(list(range(5, 15 + i)), temperature=1.0, max_new_tokens=6, seed=i) for i in range(3)
    ]

    def push():
        deadline = time.monotonic() + 30
        while not engine._queue and time.monotonic() < deadline:  # the requests are waiting
            time.sleep(0.001)
        assert engine._queue
        for name, tensor in other.state_dict().items():  # one bucket per tensor
            asyncio.run(engine.update_weights([(name, tensor)]))

    served = engine.serve_while(lambda: run_all(engine, reqs), first=push)
    expected = run_all(HFEngine(other), reqs)
    assert [r.token_ids for r in served] == [r.token_ids for r in expected]


def test_a_burst_is_admitted_whole_whenever_the_serving_thread_looks(model):
    """Requests queued in one turn of the caller's event loop start together even when the
    serving thread looks in the middle of that turn (here: a weight load ends while the loop is
    blocked between the burst's two requests)."""
    engine = HFEngine(model)
    reqs = [
        request(list(range(5, 15 + i)), temperature=1.0, max_new_tokens=4, seed=i) for i in (0, 1)
    ]

    async def caller():
        async def blocking():
            time.sleep(0.5)  # holds this event loop between the two requests of the burst

        return await asyncio.gather(engine.generate(reqs[0]), blocking(), engine.generate(reqs[1]))

    def first():
        deadline = time.monotonic() + 30
        while not (engine._arriving or engine._queue) and time.monotonic() < deadline:
            time.sleep(0.001)
        assert engine._arriving or engine._queue  # the first request is in, the second not yet
        asyncio.run(engine.update_weights(list(model.state_dict().items())[:1]))

    engine.serve_while(lambda: asyncio.run(caller()), first=first)
    assert engine.stats["batches"] == 1 and engine.stats["largest_batch"] == 2


@pytest.mark.parametrize("batching", ["slots", "slots-sdpa", "padded"])
def test_rows_joining_and_leaving_at_random_keep_every_request_exact(model, batching, monkeypatch):
    """Churn: requests of mixed prompt lengths and budgets (two of each wave sharing a prompt)
    arrive in waves while others run; each one samples what it samples alone (same seed), with
    log-probs equal to the trainer's recomputation. With slot batching, rows leaving mid-batch
    hand their slots to the last rows, and the KV buffers grow past their first size; its
    attention runs as batched matmuls on CPU, or (slots-sdpa) through sdpa as for large scores
    and on GPUs."""
    import random

    from mua.engines.hf import hf_slots

    if batching == "slots-sdpa":
        monkeypatch.setattr(hf_slots, "_MATMUL_SCORES_MAX", 0)
    slot_batching = batching != "padded"
    rng = random.Random(0)
    engine = HFEngine(model, slot_batching=slot_batching)
    assert type(engine._batch).__name__ == ("SlotBatch" if slot_batching else "RunningBatch")
    waves = []
    for wave in range(3):
        reqs = []
        for i in range(6):
            start = rng.randrange(5, 300)
            prompt = list(range(start, start + rng.randrange(3, 40)))
            reqs.append(
                request(
                    prompt, temperature=1.0, max_new_tokens=rng.randrange(1, 70), seed=wave * 10 + i
                )
            )
        reqs[2].prompt_ids = list(reqs[1].prompt_ids)  # a task's samples: one prompt, two seeds
        waves.append(reqs)
    waves[2][0] = request(list(range(7, 150)), temperature=1.0, max_new_tokens=30, seed=77)

    async def go():
        pending = []
        for reqs in waves:
            pending += [asyncio.ensure_future(engine.generate(r)) for r in reqs]
            target = engine.stats["steps"] + 7
            while engine.stats["steps"] < target and not all(f.done() for f in pending):
                await asyncio.sleep(0.001)
        return await asyncio.gather(*pending)

    results = asyncio.run(go())
    assert engine.stats["batches"] >= 3 and engine.stats["largest_batch"] > 6
    everything = [r for reqs in waves for r in reqs]
    for r, res in zip(everything, results, strict=True):
        assert len(res.token_ids) == r.sampling.max_new_tokens
        alone = run_all(HFEngine(model, slot_batching=slot_batching), [r])[0]
        assert alone.token_ids == res.token_ids
        ref = recompute_logprobs(model, r.prompt_ids, res.token_ids, 1.0)
        assert max(abs(a - b) for a, b in zip(ref, res.logprobs, strict=True)) < 1e-5
    if slot_batching:
        assert len(engine._batch) == 0 and engine._batch.kv.columns == 0  # freed when idle


def test_slot_batching_falls_back_to_padded_rows_for_sliding_window_models():
    from mua.engines.hf.hf_slots import supports

    sliding = load_model("tiny:qwen2-1m", dtype="float32", seed=0)
    sliding.config.use_sliding_window, sliding.config.sliding_window = True, 16
    assert not supports(sliding)
    assert type(HFEngine(sliding)._batch).__name__ == "RunningBatch"
    assert supports(load_model("tiny:llama-1m", dtype="float32", seed=0))


@pytest.mark.parametrize("slot_batching", [True, False])
def test_a_keyless_next_turn_reuses_kv_by_content_and_stays_exact(model, slot_batching):
    """Requests without a route key (what `mua serve` receives) find an earlier request's KV by
    their prompt's content: the follow-up turns prefill only their suffix, sample what a cold
    engine samples, and keep exact log-probs."""
    engine = HFEngine(model, slot_batching=slot_batching)
    turn1 = [
        request(list(range(10 + 40 * i, 40 + 40 * i)), temperature=1.0, max_new_tokens=6, seed=i)
        for i in range(3)
    ]
    first = run_all(engine, turn1)
    turn2 = [
        request(
            r.prompt_ids + res.token_ids + [301, 302, 303],
            temperature=1.0,
            max_new_tokens=8,
            seed=5 + i,
        )
        for i, (r, res) in enumerate(zip(turn1, first, strict=True))
    ]
    second = run_all(engine, turn2)
    assert engine.stats["prefix_hits"] == 3
    assert engine.stats["prefix_tokens_reused"] == sum(
        len(r.prompt_ids) + len(res.token_ids) - 1 for r, res in zip(turn1, first, strict=True)
    )
    cold = run_all(HFEngine(model, prefix_cache_mb=0, slot_batching=slot_batching), turn2)
    assert [c.token_ids for c in cold] == [s.token_ids for s in second]
    for r, res in zip(turn2, second, strict=True):
        ref = recompute_logprobs(model, r.prompt_ids, res.token_ids, 1.0)
        assert max(abs(a - b) for a, b in zip(ref, res.logprobs, strict=True)) < 1e-5


def test_the_decoding_group_is_the_general_group_of_one_token_per_live_row():
    """`_Group.decoding` (every step's live rows) builds what the general constructor builds for
    live rows 0..n-1 feeding packed tokens 0..n-1, one each, at their columns."""
    from mua.engines.hf.hf_slots import _Group

    cols = [5, 9, 2, 7]
    fast = _Group.decoding(cols, torch.device("cpu"))
    general = _Group(
        0, torch.arange(4)[:, None], torch.tensor(cols)[:, None], max(cols) + 1, torch.device("cpu")
    )
    assert (
        (fast.start, fast.end, fast.width, fast.columns, fast.run_start)
        == (
            general.start,
            general.end,
            general.width,
            general.columns,
            general.run_start,
        )
        == (0, 4, 1, 10, 0)
    )
    assert torch.equal(fast.mask, general.mask)
    assert torch.equal(
        fast.flat_mask_for(2, 2, torch.float32), general.flat_mask_for(2, 2, torch.float32)
    )
