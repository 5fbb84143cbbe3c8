"""A third-party engine for tests/unit/test_engine_registry.py: a spec with a settings model of its
own (`rollout.mine`), a chosen-engine rule, a launch check and a standalone engine. Registered by
`MUA_ENGINES=mine=engine_plugin_mine:SPEC`; not a test module."""

from __future__ import annotations

import dataclasses

from pydantic import Field, PositiveInt

from mua.engines.engine_spec import EngineSpec
from mua.errors import UsageError
from mua.recipe_section import Section


class MineSettings(Section):
    """The mine engine's settings."""

    slots: PositiveInt = Field(2, description="Requests served at once.")
    url: str = Field("", description="Where its server runs; required when engine=mine.")


LAUNCH_CHECKS: list[str] = []


def build(*_args):
    return "built"


def check_chosen(rollout) -> None:
    if not rollout.mine.url:
        raise ValueError("rollout.engine=mine needs rollout.mine.url")


def check_launch(recipe) -> None:
    LAUNCH_CHECKS.append(recipe.rollout.engine)
    raise UsageError("mine cannot launch here")


def standalone(recipe, path, tokenizer):
    return ("standalone", path)


# the hooks without a section: for a process that registers the engine after mua.config is
# imported (its `rollout.mine` section exists only where MUA_ENGINES was set before)
HOOKS_ONLY = EngineSpec(name="mine", build=build, check_launch=check_launch, standalone=standalone)
SPEC = dataclasses.replace(HOOKS_ONLY, settings=MineSettings, check_chosen=check_chosen)
