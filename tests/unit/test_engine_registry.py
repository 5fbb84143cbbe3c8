"""`rollout.engine` names an `EngineSpec` through `mua.engines.registry`: the built-in engines, one
spec each; one added by `MUA_ENGINES` (a spec with its own `rollout.<name>` section, or a bare
builder); one-line errors for an unknown name or a malformed entry; recipe validation, the
launcher, `mua eval`/`rollout` and the memory pre-flight reading the spec's hooks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mua.config.rollout import RolloutConfig
from mua.engines import registry
from mua.engines.engine_contract import ColocatedEngine
from mua.engines.engine_spec import EngineSpec
from mua.errors import UsageError

HERE = Path(__file__).resolve().parent


def build_nothing(*_args):  # an old-style builder the tests register by name
    return "built"


def test_each_builtin_engine_is_one_spec_in_its_folder():
    assert registry.BUILTIN_ENGINES == {
        name: f"mua.engines.{name}.spec:SPEC" for name in ("hf", "sglang", "vllm")
    }
    assert registry.list_engines() == ["hf", "sglang", "vllm"]
    from mua.engines.hf.colocated import HFColocated
    from mua.engines.sglang.colocated import SGLangColocated
    from mua.engines.sglang.settings import SGLangConfig
    from mua.engines.vllm.colocated import VLLMColocated
    from mua.engines.vllm.settings import VLLMConfig

    specs = {name: registry.engine_spec(name) for name in registry.list_engines()}
    assert all(isinstance(s, EngineSpec) and s.name == n for n, s in specs.items())
    assert specs["hf"].build.__module__ == "mua.engines.hf.colocated"
    assert specs["sglang"].build.__module__ == "mua.engines.sglang.colocated"
    assert specs["vllm"].build.__module__ == "mua.engines.vllm.colocated"
    assert registry.engine_sections() == {"sglang": SGLangConfig, "vllm": VLLMConfig}
    assert RolloutConfig.model_fields["vllm"].annotation is VLLMConfig
    assert specs["hf"].check_launch is None and specs["sglang"].standalone is None
    for cls in (HFColocated, SGLangColocated, VLLMColocated):
        assert issubclass(cls, ColocatedEngine)


def test_settings_modules_import_no_engine_code():
    code = (
        "import sys, mua.config.rollout; "
        "print(sorted(m for m in sys.modules if m.startswith('mua.engines') or m == 'torch'))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == [
        "['mua.engines',", "'mua.engines.engine_spec',", "'mua.engines.hf',",
        "'mua.engines.hf.spec',", "'mua.engines.registry',", "'mua.engines.server_settings',",
        "'mua.engines.sglang',", "'mua.engines.sglang.settings',", "'mua.engines.sglang.spec',",
        "'mua.engines.vllm',", "'mua.engines.vllm.settings',", "'mua.engines.vllm.spec']",
    ]  # fmt: skip


def test_an_old_style_builder_added_by_the_environment_is_a_spec_with_build_only(monkeypatch):
    with pytest.raises(
        ValueError, match="unknown engine 'mine'; use one of: hf, openai, sglang, vllm"
    ):
        RolloutConfig(engine="mine")
    monkeypatch.setenv(registry.ENV_VAR, f"mine={__name__}:build_nothing")
    assert "mine" in registry.list_engines()
    spec = registry.engine_spec("mine")
    assert spec == EngineSpec(name="mine", build=build_nothing)
    assert registry.engine_builder("mine")() == "built"
    assert RolloutConfig(engine="mine").engine == "mine"


def test_unknown_names_and_bad_entries_are_one_line(monkeypatch):
    with pytest.raises(
        UsageError, match=r"unknown rollout.engine 'mine'; known: hf, sglang, vllm$"
    ):
        registry.engine_builder("mine")
    monkeypatch.setenv(registry.ENV_VAR, "broken")
    with pytest.raises(UsageError, match="not name=module:function") as err:
        registry.list_engines()
    assert "\n" not in str(err.value)


def test_an_engines_hooks_are_asked_by_the_launcher_eval_and_rollout(monkeypatch):
    import engine_plugin_mine

    from mua.config import load_recipe
    from mua.train.launcher import _check_rl_inputs

    monkeypatch.setenv(registry.ENV_VAR, "mine=engine_plugin_mine:HOOKS_ONLY")
    monkeypatch.syspath_prepend(str(HERE))
    recipe = load_recipe(None, ["rollout.engine=mine"], verb="train")
    with pytest.raises(UsageError, match="mine cannot launch here"):
        _check_rl_inputs(recipe)
    assert engine_plugin_mine.LAUNCH_CHECKS == ["mine"]
    assert registry.standalone_engine(recipe, "some/model", None) == ("standalone", "some/model")
    assert registry.engine_memory_share("mine", recipe.rollout) is None
    import mua.engines.hf.colocated as hf_colocated

    monkeypatch.setattr(hf_colocated, "standalone", lambda r, p, t: ("hf", p))
    monkeypatch.setattr(
        engine_plugin_mine, "HOOKS_ONLY", EngineSpec(name="mine", build=build_nothing)
    )
    # an engine without one (a trainer-only engine such as SGLang) samples with the hf engine
    assert registry.standalone_engine(recipe, "some/model", None) == ("hf", "some/model")


PLUGIN_RECIPES = """
import json
import engine_plugin_mine  # first: a plugin's settings load before the recipe models
from pydantic import ValidationError
from mua.config import load_recipe
from mua.config.rollout import RolloutConfig
from mua.errors import UsageError
out = {"type": RolloutConfig.model_fields["mine"].annotation.__name__}
r = load_recipe(None, ["rollout.engine=mine", "rollout.mine.url=http://h:1",
                       "rollout.mine.slots=3"], verb="train")
out["slots"] = r.rollout.mine.slots
out["dumped"] = r.rollout.model_dump()["mine"]
for bad in (["rollout.mine.slots=0"], ["rollout.mine.xyz=1"], ["rollout.engine=mine"]):
    try:
        load_recipe(None, [*bad, "rollout.mine.url=u"] if bad[0] != "rollout.engine=mine"
                    else bad, verb="train")
    except (UsageError, ValidationError) as e:
        out[bad[0]] = str(e)
print(json.dumps(out))
"""


def test_a_plugin_engines_section_is_validated_by_its_own_model():
    env = {**os.environ, registry.ENV_VAR: "mine=engine_plugin_mine:SPEC"}
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), env.get("PYTHONPATH", "")])
    done = subprocess.run(
        [sys.executable, "-c", PLUGIN_RECIPES], capture_output=True, text=True, env=env
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["type"] == "MineSettings"
    assert out["slots"] == 3 and out["dumped"] == {"slots": 3, "url": "http://h:1"}
    assert "rollout.mine.slots" in out["rollout.mine.slots=0"]
    assert "greater than 0" in out["rollout.mine.slots=0"]
    assert "rollout.mine.xyz" in out["rollout.mine.xyz=1"]
    assert "rollout.engine=mine needs rollout.mine.url" in out["rollout.engine=mine"]


def test_an_engine_that_cannot_be_loaded_is_one_line(monkeypatch):
    monkeypatch.setenv(registry.ENV_VAR, "gone=no_such_engine_module:SPEC")
    with pytest.raises(UsageError) as err:
        registry.engine_spec("gone")
    assert str(err.value) == (
        "rollout.engine 'gone' names no_such_engine_module:SPEC, which cannot be loaded "
        "(ModuleNotFoundError: No module named 'no_such_engine_module'); install its package "
        "or fix MUA_ENGINES"
    )
