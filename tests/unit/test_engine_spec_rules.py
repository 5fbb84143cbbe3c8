"""Each engine's recipe rules come from its `EngineSpec`, not from branches on its name in
mua.config or mua.train: the chosen engine's section check, a train recipe's engine rules, routing
replay, the memory pre-flight's settings, `mua recipe schema` and key errors inside a section."""

from __future__ import annotations

import pytest

from mua.config import load_recipe
from mua.engines import registry
from mua.engines.engine_spec import EngineSpec
from mua.errors import UsageError

R3 = ["algo.kind=grpo", "algo.routing_replay=r3"]


def build_nothing(*_args):
    return "built"


def _error(overrides: list[str]) -> str:
    with pytest.raises(UsageError) as err:
        load_recipe(None, overrides, verb="train")
    assert "\n" not in str(err.value)
    return str(err.value)


def test_the_chosen_engines_check_runs_for_every_verb_and_only_when_chosen():
    fix = "rollout.engine=vllm needs rollout.vllm.python"
    for verb in ("train", "eval", "rollout"):
        with pytest.raises(UsageError, match=fix):
            load_recipe(None, ["rollout.engine=vllm"], verb=verb)
    assert load_recipe(None, ["rollout.vllm.port=1"], verb="train").rollout.engine == "hf"
    ok = load_recipe(None, ["rollout.engine=vllm", "rollout.vllm.python=p"], verb="eval")
    assert ok.rollout.vllm.python == "p"


def test_unknown_and_bad_keys_inside_an_engine_section_name_their_path():
    assert _error(["rollout.vllm.xyz=1"]).startswith("override rollout.vllm.xyz: unknown key 'xyz'")
    assert _error(["rollout.sglang.nope=1"]).startswith("override rollout.sglang.nope: unknown key")
    bad = _error(["rollout.sglang.mem_fraction=1.5"])
    assert "rollout.sglang.mem_fraction: Input should be less than 1" in bad
    ipc = _error(["rollout.vllm.base_urls=[http://h:1]", "rollout.vllm.weight_transfer=ipc"])
    assert "rollout.vllm.weight_transfer=ipc needs a server launched" in ipc


def test_a_train_recipes_engine_rule_comes_from_the_spec():
    lora = ["model.lora.rank=4", "model.lora.embeddings=true", "rollout.lora_sync=adapter"]
    assert "cannot push its adapter to SGLang" in _error([*lora, "rollout.engine=sglang"])
    assert load_recipe(None, lora, verb="train").model.lora.embeddings  # the hf engine takes it


def test_routing_replay_asks_the_engines_spec(monkeypatch):
    assert load_recipe(None, R3, verb="train").algo.routing_replay == "r3"  # hf records them
    assert load_recipe(None, [*R3, "rollout.engine=sglang"], verb="train").rollout.engine
    vllm = [*R3, "rollout.engine=vllm", "rollout.vllm.python=p"]
    assert "set rollout.vllm.routed_experts=true" in _error(vllm)
    monkeypatch.setenv(registry.ENV_VAR, f"bare={__name__}:build_nothing")
    bare = _error([*R3, "rollout.engine=bare"])
    assert "rollout.engine=bare does not return them; use an engine that returns them" in bare


def test_the_memory_preflight_names_the_engines_own_settings(monkeypatch):
    from mua.train.memory_estimate import GIB, ModelShape, estimate_memory, run_shape_from_recipe

    sglang = load_recipe(None, ["rollout.engine=sglang", "rollout.sglang.tp_size=2"], verb="train")
    run = run_shape_from_recipe(sglang, world_size=8)
    assert (run.engine, run.engine_memory, run.engine_tp_size) == ("sglang", "fraction", 2)
    assert run.engine_setting == "rollout.sglang.mem_fraction"
    assert run.engine_kv_fix == "rollout.sglang.mem_fraction or rollout.sglang.tp_size"
    model = ModelShape(8 * 10**9, 36, 4096, 151936, 8, 128)
    problems = estimate_memory(model, run, 1 * GIB).problems()
    assert "lower rollout.sglang.mem_fraction or set parallel.cpu_offload=true" in problems[1]
    assert problems[2].endswith("raise rollout.sglang.mem_fraction or rollout.sglang.tp_size")
    hf = run_shape_from_recipe(load_recipe(None, [], verb="train"), world_size=1)
    assert (hf.engine, hf.engine_memory) == ("hf", "copy")
    spec = EngineSpec(name="x", build=build_nothing, memory_share=lambda rollout: None)
    monkeypatch.setattr(registry, "engine_spec", lambda name: spec)
    assert run_shape_from_recipe(sglang, world_size=8).engine_memory == "copy"  # the spec rules


def test_recipe_schema_lists_each_engines_settings():
    from mua.config.recipes import TrainRecipe
    from mua.config.schema_rows import schema_rows

    rows = {row[0]: row for row in schema_rows(TrainRecipe)}
    assert rows["rollout.vllm.python"][1:3] == ("str | None", "None")
    assert rows["rollout.sglang.mem_fraction"][2] == "0.5"
    assert "rollout.sglang.weights_dir" in rows and "rollout.vllm.weights_dir" in rows
    schema = TrainRecipe.model_json_schema()
    assert {"SGLangConfig", "VLLMConfig"} <= set(schema["$defs"])
