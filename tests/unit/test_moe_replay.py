"""Mixture of experts: the tiny Qwen3-MoE preset, the hf engine's routed-experts records, their
compact form with a trajectory, and routing replay in the trainer's forward passes."""

from __future__ import annotations

import asyncio
import base64
import copy

import numpy as np
import pytest
import torch

from mua.engines.engine_contract import GenerationRequest, SamplingParams
from mua.engines.hf.hf_engine import HFEngine
from mua.models import load_model, moe_replay
from mua.models.moe_replay import Replay, decode, encode, fitted
from mua.train.packed_batch import pack
from mua.train.packed_forward import accumulate, forward_only

PRESET = "tiny:qwen3moe-2m"


@pytest.fixture(scope="module")
def model():
    torch.set_num_threads(1)
    return load_model(PRESET, seed=0)


def _generate(engine, requests):
    async def run():
        return await asyncio.gather(*(engine.generate(r) for r in requests))

    return asyncio.run(run())


def _request(prompt, seed, key="", new=12):
    return GenerationRequest(
        prompt_ids=list(prompt),
        sampling=SamplingParams(temperature=1.0, max_new_tokens=new, seed=seed),
        route_key=key,
    )


def _own_routes(model, ids):
    """The experts the model itself sends every token of `ids` to: [T, layers, k]."""
    with torch.no_grad(), moe_replay.routing(model) as capture:
        model(input_ids=torch.tensor([ids]), use_cache=False)
    return capture.stacked()


def test_tiny_moe_preset_is_qwen3_moe_with_8_experts_2_per_token(model):
    config = model.config
    assert (config.model_type, config.num_experts, config.num_experts_per_tok) == (
        "qwen3_moe",
        8,
        2,
    )
    found = moe_replay.routers(model)
    assert len(found) == config.num_hidden_layers == 4
    assert not moe_replay.routers(load_model("tiny:qwen3-1m"))


def test_hf_engine_records_every_fed_token_as_the_trainer_routes_it(model):
    engine = HFEngine(model, max_batch_size=8)
    prompt = list(range(5, 30))
    first = _generate(engine, [_request(prompt, seed=1, key="conv")])[0]
    routes = first.meta["routed_experts"]
    fed = prompt + first.token_ids[:-1]  # the last sampled token is never fed
    assert routes.dtype == np.uint8 and routes.shape == (len(fed), 4, 2)
    own = _own_routes(model, fed).numpy()
    assert np.array_equal(np.sort(routes, -1), np.sort(own, -1))

    # the next turn reuses the stored prefix: its record starts with the first turn's
    second_prompt = prompt + first.token_ids + [40, 41, 42]
    second = _generate(engine, [_request(second_prompt, seed=2, key="conv")])[0]
    assert engine.stats["prefix_hits"] == 1
    again = second.meta["routed_experts"]
    assert again.shape == (len(second_prompt) + len(second.token_ids) - 1, 4, 2)
    assert np.array_equal(again[: len(fed)], routes)
    fed2 = second_prompt + second.token_ids[:-1]
    assert np.array_equal(np.sort(again, -1), np.sort(_own_routes(model, fed2).numpy(), -1))


def _bf16_engine_samples(model, count=4):
    """Sequences sampled by a bfloat16 copy of the model (as a GPU engine would run it) and
    the engine's records, fitted to each sequence."""
    engine = HFEngine(copy.deepcopy(model).to(torch.bfloat16), max_batch_size=8)
    prompts = [list(range(5 + i, 40 + i)) for i in range(count)]
    results = _generate(engine, [_request(p, seed=i, new=16) for i, p in enumerate(prompts)])
    seqs = [p + r.token_ids for p, r in zip(prompts, results, strict=True)]
    masks = [[0] * len(p) + [1] * len(r.token_ids) for p, r in zip(prompts, results, strict=True)]
    routes = [fitted(r.meta["routed_experts"], len(s)) for r, s in zip(results, seqs, strict=True)]
    return seqs, masks, routes


def test_replay_routes_every_recorded_token_as_the_engine_did_and_fails_without(model):
    seqs, masks, routes = _bf16_engine_samples(model)
    recorded = sum(len(s) - 1 for s in seqs) * 4  # every fed (token, layer): all but the last

    def old_logprobs(enforce):
        replay = Replay(routes, enforce=enforce)
        forward_only(model, seqs, 4096, "cpu", lambda mb, out: [0] * len(mb.indices), masks=masks,
                     replay=replay)  # fmt: skip
        return replay

    off, on = old_logprobs(False), old_logprobs(True)
    # the bfloat16 engine's routers chose differently for some (token, layer) decisions
    assert off.compared == on.compared == recorded
    assert off.differ > 0 and off.unfollowed == off.differ
    # with replay every recorded decision follows the engine's
    assert on.unfollowed == 0 and on.differ > 0


def test_update_forward_follows_the_records_and_trains_the_router(model):
    seqs, masks, routes = _bf16_engine_samples(model, count=2)
    trained = copy.deepcopy(model)
    replay = Replay(routes, enforce=True)

    def loss_fn(mb, out):
        logp, _ = out
        return -logp.sum(), {}

    accumulate(trained, seqs, 4096, "cpu", loss_fn, masks=masks, replay=replay)
    assert replay.compared == sum(len(s) - 1 for s in seqs) * 4
    assert replay.unfollowed == 0
    router = moe_replay.routers(trained)[0]
    assert router.weight.grad is not None and router.weight.grad.abs().sum() > 0


def test_shared_prompt_rows_carry_each_token_record():
    prefix = list(range(100, 120))
    seqs = [prefix + [5, 6, 7], prefix + [8, 9]]
    masks = [[0] * 20 + [1] * 3, [0] * 20 + [1] * 2]
    routes = [np.arange(len(s) * 2 * 1, dtype=np.uint8).reshape(len(s), 2, 1) for s in seqs]
    routes[1][:20] = routes[0][:20]  # one prompt, one record
    mb = pack(seqs, [0, 1], masks=masks, share_prefixes=True, routes=routes)
    assert mb.segment_prefix is not None  # the prompt is fed once
    # the row: the prefix, then each sequence's own tokens but its last
    expected = np.concatenate([routes[0][:22], routes[1][20:21]]).astype(np.int64)
    assert mb.routes.tolist() == expected.tolist()


def test_records_are_top_k_bytes_per_token_per_layer_and_round_trip():
    routes = np.random.default_rng(0).integers(0, 8, size=(50, 4, 2)).astype(np.uint8)
    fields = encode(routes)
    assert len(base64.b64decode(fields["data"])) == 50 * 4 * 2
    assert np.array_equal(decode(fields), routes)
    assert decode({}) is None
    padded = fitted(routes[:10], 12)
    assert padded.shape == (12, 4, 2) and (padded[10:] == 255).all()
    long = moe_replay.as_long(padded, 12, (4, 2))
    assert (long[10:] == -1).all() and torch.equal(long[:10], torch.from_numpy(routes[:10]).long())
    assert moe_replay.route_dtype(255) == np.uint16


def test_trajectory_keeps_the_first_record_of_each_position():
    from mua.rollout.trajectory import Trajectory
    from mua.rollout.transcript import TranscriptBuilder

    builder = TranscriptBuilder(renderer=None)
    builder.record.append(list(range(9)), "prompt", 0)
    first = np.zeros((5, 2, 2), dtype=np.uint8)
    builder.add_routes(first)
    later = np.ones((8, 2, 2), dtype=np.uint8)  # re-prefilled after a weight push
    builder.add_routes(later)
    assert builder.routes[:5].tolist() == first.tolist()
    assert builder.routes[5:].tolist() == later[5:].tolist()
    builder.truncate(6)
    assert len(builder.routes) == 6
    traj = Trajectory("t", "0:t", 0, record=builder.record)
    back = Trajectory.from_json(traj.to_json())
    assert np.array_equal(back.record.routes, builder.routes)


def test_routing_metrics_share_of_differing_decisions():
    from types import SimpleNamespace

    from mua.train.rl_metrics import routing_metrics

    assert routing_metrics(0, 0, SimpleNamespace(routing_replay="off")) == {}
    assert routing_metrics(400, 10, SimpleNamespace(routing_replay="r3")) == {
        "moe/routing_disagreement": 0.025,
        "moe/routed_decisions": 400.0,
        "moe/routing_replay": 1.0,
    }


def test_load_balancing_loss_is_one_when_even_and_trains_the_router(model):
    from mua.models.moe_replay import load_balancing_loss

    capture = moe_replay.Capture(
        used=[[torch.tensor([[0, 1], [2, 3]])]], logits=[[torch.zeros(2, 4)]]
    )
    assert float(load_balancing_loss(capture, 4)) == pytest.approx(1.0)
    skewed = moe_replay.Capture(used=[[torch.tensor([[0, 1], [0, 1]])]],
                                logits=[[torch.tensor([[4.0, 4.0, 0.0, 0.0]] * 2)]])  # fmt: skip
    assert float(load_balancing_loss(skewed, 4)) > 1.5

    trained = copy.deepcopy(model)
    seqs = [list(range(5, 40)), list(range(50, 70))]
    masks = [[0] * 10 + [1] * 25, [0] * 5 + [1] * 15]

    def loss_fn(mb, out):
        return out[0].sum() * 0.0, {}  # only the load-balancing loss has gradients

    stats = accumulate(trained, seqs, 4096, "cpu", loss_fn, masks=masks, router_aux_coef=0.01)
    # summed over micro-batches it is the token-weighted mean: 1 at an even load, more otherwise
    assert sum(s["moe/aux_loss"] for s in stats) >= 1.0
    router = moe_replay.routers(trained)[0]
    assert router.weight.grad is not None and router.weight.grad.abs().sum() > 0
    assert not any(
        "moe/aux_loss" in s for s in accumulate(trained, seqs, 4096, "cpu", loss_fn, masks=masks)
    )


def test_a_load_balancing_loss_on_a_dense_model_is_one_line():
    from mua.errors import UsageError

    dense = load_model("tiny:qwen3-1m")
    with pytest.raises(UsageError, match="has no MoE router; set algo.router_aux_coef=0"):
        accumulate(dense, [[5, 6, 7]], 64, "cpu", lambda mb, out: (out[0].sum(), {}),
                   masks=[[0, 1, 1]], router_aux_coef=0.01)  # fmt: skip


def test_replay_without_an_engine_that_returns_routes_is_refused(tmp_path):
    from mua.config import load_recipe
    from mua.errors import UsageError

    path = tmp_path / "r.yaml"
    path.write_text("algo:\n  kind: grpo\n  routing_replay: r3\n")
    assert load_recipe(path, [], verb="train").algo.routing_replay == "r3"  # the hf engine
    vllm = ["rollout.engine=vllm", "rollout.vllm.python=/usr/bin/python3"]
    with pytest.raises(UsageError, match="set rollout.vllm.routed_experts=true"):
        load_recipe(path, vllm, verb="train")
    asked = load_recipe(path, [*vllm, "rollout.vllm.routed_experts=true"], verb="train")
    assert asked.rollout.vllm.routed_experts
