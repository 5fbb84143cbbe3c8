"""`rollout.lora_sync: adapter` checked by SGLang's own code, for every covered release.

For each release (see test_sglang_contract.py for how the probe runs SGLang code on CPU):
- the release has /load_lora_adapter_from_tensors exactly where mua's table says (0.5.8 on), and
  takes the payload field mua sends it (one per TP rank from 0.5.17);
- where it has the endpoint: the load body mua builds for a real peft adapter is built by its
  request class (which has no `weight_version` field: the client keeps the adapter's version), its
  payload (two TP ranks) normalized and deserialized by its own serializer into
  the adapter's tensors, every name placed in a layer by its own get_layer_id, the adapter config
  read by its LoRAConfig; the unload body by its request class; a /generate body naming the adapter
  in `lora_path` normalized by GenerateReqInput; the launch command with mua's LoRA flags parsed by
  its ServerArgs parser (LoRA on, the rank, the target modules);
- where it has not: mua refuses `adapter` for that release with one line.
"""

from __future__ import annotations

import pytest
import torch

from mua.config.model import LoraConfig
from mua.engines.engine_contract import GenerationRequest, SamplingParams
from mua.engines.sglang import lora_endpoints, protocol
from mua.engines.sglang.releases import COVERED_RELEASES, ReleaseTraits
from mua.errors import UsageError
from tests.contract.test_sglang_contract import _run_probe, _side_folder

MODEL = "tiny:qwen2-1m"
LORA_KEYS = ["enable_lora", "max_lora_rank", "lora_target_modules", "model_path"]


def _adapter():
    from mua.models import load_model
    from mua.models.lora import adapter_config_dict, adapter_file_names, add_adapters

    model = add_adapters(load_model(MODEL, seed=0), LoraConfig(rank=4, alpha=8))
    gen = torch.Generator().manual_seed(3)
    named = [
        (n, torch.randn(t.shape, generator=gen))  # a trained adapter: B is not 0
        for n, t in adapter_file_names(model.named_parameters())
    ]
    return named, adapter_config_dict(model)


def _launch_argv(lora: LoraConfig) -> list[str]:
    from mua.engines.sglang.sglang_launch import launch_command

    cmd = launch_command(
        "/models/policy",
        port=31234,
        mem_fraction=0.45,
        tp_size=2,
        extra_args=lora_endpoints.launch_args(lora),
    )
    return cmd[3:]


@pytest.mark.parametrize("version", COVERED_RELEASES)
def test_sglang_release_takes_the_adapter_push_mua_sends(version, tmp_path):
    folder = _side_folder(version)
    traits = ReleaseTraits.of(version)
    facts = _run_probe(folder, {"checks": [{"kind": "facts", "side": str(folder)}]}, tmp_path)
    routes = facts["results"][0]["routes"]
    assert traits.lora_tensors == ("/load_lora_adapter_from_tensors" in routes)
    if not traits.lora_tensors:
        with pytest.raises(UsageError, match=f"needs SGLang >= 0.5.8.*{version}") as err:
            lora_endpoints.refuse_release(version, "the installed sglang")
        assert "\n" not in str(err.value)
        return

    named, config = _adapter()
    body = lora_endpoints.load_body("mua-lora-3", named, config, traits, tp_size=2)
    request = GenerationRequest(
        prompt_ids=[5, 6, 7], sampling=SamplingParams(temperature=0.0, max_new_tokens=8)
    )
    generate = protocol.generate_body(request, rid="r-1", lora_path="mua-lora-3")
    checks = [
        {"kind": "request", "cls": "LoadLoRAAdapterFromTensorsReqInput", "body": body},
        {
            "kind": "request",
            "cls": "LoadLoRAAdapterFromTensorsReqInput",
            "body": {**body, "weight_version": "3"},
        },
        {
            "kind": "request",
            "cls": "UnloadLoRAAdapterReqInput",
            "body": lora_endpoints.unload_body("mua-lora-2"),
        },
        {"kind": "lora_payload", "body": body, "tp_rank": 1},
        {"kind": "generate", "bodies": [generate], "vocab_size": 1000},
        {"kind": "server_args", "argv": _launch_argv(LoraConfig(rank=16)), "keys": LORA_KEYS},
        {
            "kind": "server_args",
            "argv": _launch_argv(LoraConfig(rank=8, target_modules=["q_proj", "v_proj"])),
            "keys": LORA_KEYS,
        },
    ]
    out = _run_probe(folder, {"checks": checks}, tmp_path)
    assert out["version"] == version
    load, versioned, unload, payload, gen, all_linear, named_modules = out["results"]
    assert load["ok"] and unload["ok"], (load, unload)
    # no covered release takes a weight_version with an adapter: the client keeps it by name
    # (SGLangEngine.load_adapter); a release that takes one should get it sent instead
    assert not versioned["ok"] and "weight_version" in versioned["error"], versioned
    assert payload["ok"], payload
    assert payload["payloads"] == (2 if traits.lora_per_rank_payloads else 1)
    assert payload["rank"] == 4
    assert set(payload["target_modules"]) >= {"q_proj", "k_proj", "v_proj", "o_proj", "down_proj"}
    got = payload["tensors"]
    assert sorted(got) == sorted(n for n, _ in named)
    for name, tensor in named:
        assert got[name]["shape"] == list(tensor.shape)
        assert got[name]["sum"] == pytest.approx(float(tensor.double().sum()), abs=1e-6)
        assert got[name]["layer"] == int(name.split(".layers.", 1)[1].split(".", 1)[0])
    assert gen["results"] == [{"ok": True}], gen
    assert all_linear["ok"], all_linear
    assert all_linear["args"]["enable_lora"] is True and all_linear["args"]["max_lora_rank"] == 16
    assert all_linear["args"]["lora_target_modules"] == ["all"]
    assert named_modules["args"]["lora_target_modules"] == ["q_proj", "v_proj"]
