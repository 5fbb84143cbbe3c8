"""Find rollout engines by name: `rollout.engine` -> the builder of its `ColocatedEngine`.

Builders are lazy "module:function" strings (`BUILTIN_ENGINES`), the `mua.engines` entry-point
group, or `MUA_ENGINES` (`name=module:function,...`, read in every process). `build(rollout,
model_cfg, parallel, dist, policy, tokenizer)` returns the rank's engine; optional hooks found by
`engine_hook`: `check_launch(recipe)` (before torchrun), `standalone(recipe, path, tokenizer)` (for
`mua eval`/`rollout`), `memory_share(rollout)` (the memory pre-flight). Core code never branches
on an engine's name. Not here: `rollout.engine: openai` (evaluation only, no trainer engine).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

from mua.errors import UsageError
from mua.plugin_targets import load_target, with_entry_points

ENV_VAR = "MUA_ENGINES"

BUILTIN_ENGINES: dict[str, str] = {
    "hf": "mua.engines.hf.colocated:build",
    "sglang": "mua.engines.sglang.colocated:build",
    "vllm": "mua.engines.vllm.colocated:build",
}


def _env_targets() -> dict[str, str]:
    out = {}
    for item in filter(None, (p.strip() for p in os.environ.get(ENV_VAR, "").split(","))):
        name, sep, target = item.partition("=")
        if not sep or ":" not in target or not name.strip():
            raise UsageError(
                f"{ENV_VAR} entry {item!r} is not name=module:function; fix or unset {ENV_VAR}"
            )
        out[name.strip()] = target.strip()
    return out


def _all_targets() -> dict[str, str]:
    targets = with_entry_points(BUILTIN_ENGINES, "mua.engines")
    for name, target in _env_targets().items():
        targets.setdefault(name, target)
    return targets


def list_engines() -> list[str]:
    """Names of the engines a recipe's `rollout.engine` may name for training."""
    return sorted(_all_targets())


def engine_builder(name: str) -> Callable:
    """The builder registered under `name` (imported now)."""
    target = _all_targets().get(name)
    if target is None:
        raise UsageError(f"unknown rollout.engine {name!r}; known: {', '.join(list_engines())}")
    return load_target(target, "build")


def engine_hook(name: str, hook: str) -> Callable | None:
    """The optional `hook` (`check_launch`, `standalone`) of the module holding `name`'s builder."""
    return getattr(sys.modules[engine_builder(name).__module__], hook, None)


def standalone_engine(recipe, path: str, tokenizer):
    """A `RolloutEngine` of `recipe.rollout.engine` serving `path` (a model folder, hub id or
    preset), outside a trainer; one line when that engine has none."""
    name = recipe.rollout.engine
    build = engine_hook(name, "standalone")
    if build is None:  # an engine that runs inside a trainer only (SGLang): the hf engine
        print(f"rollout.engine={name} samples here with the hf engine, in this process", flush=True)
        build = engine_hook("hf", "standalone")
    return build(recipe, path, tokenizer)


def engine_memory_share(name: str, rollout):
    """The `EngineShare` the engine `name` declares for `rollout` (its `memory_share` hook), or
    None for an engine that holds a model copy and one trajectory's cache."""
    share = engine_hook(name, "memory_share")
    return share(rollout) if share is not None else None
