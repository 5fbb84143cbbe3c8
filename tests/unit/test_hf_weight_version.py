"""weight_version in the hf engine, as the SGLang client reports it: each result names the version
of the weights that sampled it (`meta["weight_version"]`), moved by full pushes and adapter pushes
that carry one, directly and through `EngineSync`'s hf flow (full and `lora_sync: adapter`)."""

from __future__ import annotations

import asyncio
import copy

import pytest
import torch

from mua.config.model import LoraConfig
from mua.engines.engine_contract import GenerationRequest, SamplingParams
from mua.engines.hf.colocated import HFColocated
from mua.engines.hf.hf_engine import HFEngine
from mua.train.engine_sync import EngineSync

MODEL = "tiny:qwen2-1m"


@pytest.fixture(scope="module")
def model():
    from mua.models import load_model

    torch.set_num_threads(1)
    return load_model(MODEL, dtype="float32", seed=0)


def _lora_policy():
    from mua.models import load_model
    from mua.models.lora import add_adapters

    return add_adapters(load_model(MODEL, seed=0), LoraConfig(rank=4, alpha=8))


async def _versions(engine) -> list:
    """The weight_version each of a few concurrent results reports (None: no key)."""
    requests = [
        GenerationRequest(prompt_ids=p, sampling=SamplingParams(temperature=0.0, max_new_tokens=3))
        for p in ([5, 6, 7], [9, 10], [11, 12, 13, 14])
    ]
    results = await asyncio.gather(*(engine.generate(r) for r in requests))
    return [r.meta.get("weight_version") for r in results]


def test_results_report_the_version_of_the_last_push_that_carried_one(model):
    engine = HFEngine(model)
    assert asyncio.run(_versions(engine)) == [None] * 3  # as loaded: nothing pushed a version
    params = list(model.named_parameters())
    asyncio.run(engine.update_weights(params, weight_version="3"))
    assert engine.weight_version == "3"
    assert asyncio.run(_versions(engine)) == ["3"] * 3
    engine.load_weights(params[:1])  # a push without a version keeps the engine's (as SGLang)
    assert asyncio.run(_versions(engine)) == ["3"] * 3
    engine.load_weights([], weight_version=4)
    assert asyncio.run(_versions(engine)) == ["4"] * 3


def test_an_adapter_reports_its_own_version_and_the_base_the_full_push(model):
    from mua.models.lora import adapter_config_dict, adapter_file_names

    policy = _lora_policy()
    engine = HFEngine(model)
    engine.load_weights([], weight_version="base-1")
    tensors = list(adapter_file_names(policy.named_parameters()))
    engine.load_adapter("mua-lora-0", tensors, adapter_config_dict(policy), "7")
    assert asyncio.run(_versions(engine)) == ["7"] * 3
    engine.use_adapter(None)  # the base model samples: the full push's version
    assert asyncio.run(_versions(engine)) == ["base-1"] * 3


def _sync(policy, engine, **kwargs) -> EngineSync:
    return EngineSync(HFColocated(engine, bucket_mb=1), policy, **kwargs)


def _rollout_versions(sync: EngineSync) -> list:
    return sync.run(lambda: _versions(sync.engine))


def test_engine_sync_full_pushes_move_the_hf_engines_version(model):
    trainer = copy.deepcopy(model)
    sync = _sync(trainer, HFEngine(model))
    assert _rollout_versions(sync) == ["0"] * 3  # the initial push
    with torch.no_grad():
        next(trainer.parameters()).add_(0.5)
    sync.push_weights()  # an update: pushed at once, several buckets, one version
    assert sync.engine.weight_version == "1"
    assert _rollout_versions(sync) == ["1"] * 3
    sync.mark_stale()  # a re-push of unchanged weights keeps their version
    assert _rollout_versions(sync) == ["1"] * 3


def test_engine_sync_adapter_pushes_report_the_trainers_version(model):
    sync = _sync(_lora_policy(), HFEngine(model), lora_sync="adapter")
    assert _rollout_versions(sync) == ["0"] * 3
    sync.push_weights()
    assert _rollout_versions(sync) == ["1"] * 3
    assert sync.engine.lora.names == ["mua-lora-1"]  # the older version is gone
    assert sync.engine.weight_version is None  # no full push: the base is as loaded
