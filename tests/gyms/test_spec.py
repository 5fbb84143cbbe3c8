"""The shared spec builder: what an `interact_with_env` gym's `GYM` takes from its env class and
docstring, the budgets it gets, and the lazily imported `data_prep` task builders."""

from __future__ import annotations

import asyncio
import importlib

import pytest

from gyms.common.spec import INTERACT_BUDGETS, interact_gym, package_gym
from gyms.function.env import FunctionEnv
from mua.gym.registry import get_gym, list_gyms


def _noop(*args):
    return {}


def test_every_gym_has_a_one_line_description():
    for name in list_gyms():
        description = get_gym(name).description
        assert description and "\n" not in description, name


def test_name_weights_and_env_come_from_the_env_class():
    spec = interact_gym("Probe a rule.\n\nMore text.", FunctionEnv, _noop, _noop, _noop)
    assert spec.name == "function"
    assert spec.description == "Probe a rule."
    assert spec.reward_components == FunctionEnv.default_weights
    assert spec.reward_components is not FunctionEnv.default_weights
    assert spec.make_env is FunctionEnv
    assert spec.budgets == INTERACT_BUDGETS


def test_budget_overrides_and_typos():
    spec = interact_gym(None, FunctionEnv, _noop, _noop, _noop, max_turns=3)
    assert spec.description == ""
    assert spec.budgets == {**INTERACT_BUDGETS, "max_turns": 3}
    with pytest.raises(TypeError, match="max_turn"):
        interact_gym(None, FunctionEnv, _noop, _noop, _noop, max_turn=3)


def test_turn_expert_passes_the_number_of_assistant_turns():
    seen = []
    spec = interact_gym(None, FunctionEnv, _noop, lambda turn, task: seen.append(turn), _noop)
    policy = spec.expert(None)
    messages = [{"role": "system"}, {"role": "assistant"}, {"role": "user"}, {"role": "assistant"}]
    asyncio.run(policy(messages, None))
    assert seen == [2]


def test_a_package_gym_is_named_after_its_package_and_described_by_its_docstring():
    spec = package_gym(
        "gyms.probe", "Probe a rule.\n\nMore text.", FunctionEnv, _noop, _noop, _noop
    )
    assert (spec.name, spec.description) == ("probe", "Probe a rule.")
    assert spec.make_env is FunctionEnv and spec.random_action is _noop
    spec = package_gym("probe", None, FunctionEnv, _noop, None, None, budgets={"max_turns": 3})
    assert (spec.name, spec.description, spec.expert, spec.budgets) == (
        "probe",
        "",
        None,
        {"max_turns": 3},
    )
    for name in ("guess", "math", "tau", "tau2", "travel"):
        assert get_gym(name).name == name
        assert (
            get_gym(name).description
            == importlib.import_module(f"gyms.{name}").__doc__.split("\n")[0]
        )
