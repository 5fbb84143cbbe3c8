"""`rollout.lora_sync: adapter` in the hf engine: the base stays, only the adapter arrives, under a
versioned name. Greedy outputs after an adapter push equal those after a merged push of the same
weights (tokens identical, log-probs within a tolerance), a second push replaces the first and
unloads it, and the version bookkeeping never frees a name a request in flight still uses."""

from __future__ import annotations

import asyncio

import pytest
import torch

from mua.config.model import LoraConfig
from mua.engines.adapter_versions import AdapterVersions, adapter_name
from mua.engines.engine_contract import GenerationRequest, SamplingParams

MODEL = "tiny:qwen2-1m"


def _policy(seed: int):
    from mua.models import load_model
    from mua.models.lora import add_adapters

    model = add_adapters(load_model(MODEL, seed=0), LoraConfig(rank=4, alpha=8))
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if ".lora_B." in name:  # a trained adapter is not 0
                p.copy_(torch.randn(p.shape, generator=gen) * 0.3)
    return model


def _engine():
    from mua.engines.hf.hf_engine import HFEngine
    from mua.models import load_model

    return HFEngine(load_model(MODEL, seed=0), copy_model=False)


def _greedy(engine) -> list:
    prompts = [[5, 6, 7, 8], [11, 12, 13], [40, 41, 42, 43, 44, 45]]

    async def run():
        return await asyncio.gather(
            *(
                engine.generate(
                    GenerationRequest(
                        prompt_ids=p, sampling=SamplingParams(temperature=0.0, max_new_tokens=12)
                    )
                )
                for p in prompts
            )
        )

    return asyncio.run(run())


def _push_adapter(engine, policy, sequence: int) -> str:
    from mua.models.lora import adapter_config_dict, adapter_file_names

    name = adapter_name(sequence)
    engine.load_adapter(
        name, adapter_file_names(policy.named_parameters()), adapter_config_dict(policy)
    )
    return name


def _push_merged(engine, policy) -> None:
    from mua.models.lora import lora_scalings, merged_params

    engine.load_weights(merged_params(policy.named_parameters(), lora_scalings(policy)))


def _assert_same(a, b) -> None:
    for x, y in zip(a, b, strict=True):
        assert x.token_ids == y.token_ids
        assert max(abs(p - q) for p, q in zip(x.logprobs, y.logprobs, strict=True)) < 1e-4


def test_adapter_push_generates_as_a_merged_push_and_replaces_old_versions():
    torch.set_num_threads(1)
    base_out = _greedy(_engine())
    first, second = _policy(1), _policy(2)

    merged, adapted = _engine(), _engine()
    _push_merged(merged, first)
    name1 = _push_adapter(adapted, first, 1)
    got_first = _greedy(adapted)
    _assert_same(_greedy(merged), got_first)
    assert any(a.token_ids != b.token_ids for a, b in zip(got_first, base_out, strict=True))

    # the next version: live at once, the old one deleted, the base weights never touched
    _push_merged(merged, second)
    name2 = _push_adapter(adapted, second, 2)
    _assert_same(_greedy(merged), _greedy(adapted))
    assert adapted.lora.versions.live == name2 and adapted.lora.versions.loaded == [name2]
    assert adapted.lora.names == [name2] and adapted.lora.active == name2 and name1 != name2
    base_weight = dict(adapted.model.named_parameters())
    plain = dict(_engine().model.named_parameters())
    q = "model.layers.0.self_attn.q_proj"
    assert torch.equal(base_weight[f"{q}.base_layer.weight"], plain[f"{q}.weight"])


def test_an_adapter_that_does_not_fit_is_refused_and_the_live_one_stays():
    from mua.models.lora import adapter_config_dict, adapter_file_names

    policy = _policy(1)
    engine = _engine()
    name = _push_adapter(engine, policy, 1)
    wrong = [
        (n.replace("q_proj", "nope_proj"), t)
        for n, t in adapter_file_names(policy.named_parameters())
    ]
    with pytest.raises(ValueError, match="fit no LoRA layer"):
        engine.load_adapter(adapter_name(2), wrong, adapter_config_dict(policy))
    assert engine.lora.versions.live == name and engine.lora.names == [name]


def test_versions_unload_only_when_no_request_in_flight_names_them():
    versions = AdapterVersions()
    assert versions.begin() is None  # no adapter yet: the base
    assert versions.adopt("a") == []
    first = versions.begin()
    assert first == "a"
    assert versions.adopt("b") == []  # "a" still named by a request in flight
    assert versions.loaded == ["a", "b"] and versions.begin() == "b"
    assert versions.end(first) == ["a"]  # its last request finished: free now
    assert versions.loaded == ["b"]
    follower = AdapterVersions()
    follower.adopt("a", loaded=False)
    assert follower.adopt("b", loaded=False) == [] and follower.loaded == []


def test_several_adapters_by_name_add_switch_and_delete():
    """What `mua serve` uses: adding never changes what generates, `use_adapter` switches to any
    loaded adapter (None: the base), deleting the last one leaves the plain base model."""
    from mua.models.lora import adapter_config_dict, adapter_file_names

    first, second = _policy(1), _policy(2)
    want_first, want_second = _engine(), _engine()
    _push_merged(want_first, first)
    _push_merged(want_second, second)
    base_out = _greedy(_engine())
    engine = _engine()
    for name, policy in (("a", first), ("b", second)):
        named = adapter_file_names(policy.named_parameters())
        engine.add_adapter(name, named, adapter_config_dict(policy))
        assert engine.lora.active is None
        _assert_same(base_out, _greedy(engine))  # still the base
    engine.use_adapter("b")
    _assert_same(_greedy(want_second), _greedy(engine))
    engine.use_adapter("a")
    _assert_same(_greedy(want_first), _greedy(engine))
    engine.use_adapter(None)
    _assert_same(base_out, _greedy(engine))
    engine.use_adapter("b")
    engine.delete_adapter("b")  # the active one: the base is active after it
    assert engine.lora.active is None and engine.lora.names == ["a"]
    _assert_same(base_out, _greedy(engine))
    with pytest.raises(ValueError, match="no LoRA adapter named 'b'"):
        engine.use_adapter("b")
    engine.delete_adapter("a")
    assert engine.lora.peft is None
    assert not any("lora" in n for n, _ in engine.model.named_parameters())
    _assert_same(base_out, _greedy(engine))
