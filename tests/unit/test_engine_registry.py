"""`rollout.engine` names a builder through `mua.engines.registry`: the built-in engines, one added
by `MUA_ENGINES`, one-line errors for an unknown name or a malformed entry, and recipe validation
that takes the registry's names."""

from __future__ import annotations

import sys

import pytest

from mua.config.rollout import RolloutConfig
from mua.engines import registry
from mua.engines.engine_contract import ColocatedEngine
from mua.errors import UsageError


def build_nothing(*_args):  # a builder the tests register by name
    return "built"


def test_builtin_engines_build_colocated_engines():
    assert registry.list_engines() == ["hf", "sglang", "vllm"]
    from mua.engines.hf.colocated import HFColocated
    from mua.engines.sglang.colocated import SGLangColocated
    from mua.engines.vllm.colocated import VLLMColocated

    assert registry.engine_builder("hf").__module__ == "mua.engines.hf.colocated"
    assert registry.engine_builder("sglang").__module__ == "mua.engines.sglang.colocated"
    assert registry.engine_builder("vllm").__module__ == "mua.engines.vllm.colocated"
    for cls in (HFColocated, SGLangColocated, VLLMColocated):
        assert issubclass(cls, ColocatedEngine)


def test_an_engine_added_by_the_environment_is_found_and_accepted_by_recipes(monkeypatch):
    with pytest.raises(
        ValueError, match="unknown engine 'mine'; use one of: hf, openai, sglang, vllm"
    ):
        RolloutConfig(engine="mine")
    monkeypatch.setenv(registry.ENV_VAR, f"mine={__name__}:build_nothing")
    assert "mine" in registry.list_engines()
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


LAUNCH_CHECKS: list[str] = []


def check_launch(recipe):  # this module's hooks, found beside `build_nothing`
    LAUNCH_CHECKS.append(recipe.rollout.engine)
    raise UsageError("mine cannot launch here")


def standalone(recipe, path, tokenizer):
    return ("standalone", path)


def test_an_engines_hooks_are_asked_by_the_launcher_eval_and_rollout(monkeypatch):
    from mua.config import load_recipe
    from mua.train.launcher import _check_rl_inputs

    monkeypatch.setenv(registry.ENV_VAR, f"mine={__name__}:build_nothing")
    recipe = load_recipe(None, ["rollout.engine=mine"], verb="train")
    with pytest.raises(UsageError, match="mine cannot launch here"):
        _check_rl_inputs(recipe)
    assert LAUNCH_CHECKS == ["mine"]
    assert registry.standalone_engine(recipe, "some/model", None) == ("standalone", "some/model")
    assert registry.engine_hook("hf", "check_launch") is None  # the hf engine launches nothing
    import mua.engines.hf.colocated as hf_colocated

    monkeypatch.setattr(hf_colocated, "standalone", lambda r, p, t: ("hf", p))
    monkeypatch.setattr(sys.modules[__name__], "standalone", None)
    # an engine without one (a trainer-only engine such as SGLang) samples with the hf engine
    assert registry.standalone_engine(recipe, "some/model", None) == ("hf", "some/model")
