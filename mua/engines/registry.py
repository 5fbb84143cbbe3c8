"""Find rollout engines by name: `rollout.engine` -> the builder of its `ColocatedEngine`.

Built-in engines are lazy import strings ("module:function"); more come from the `mua.engines`
entry-point group, or from the `MUA_ENGINES` environment variable
(`name=module:function[,name=module:function...]`, read in every process, so torchrun's workers
see it too). A builder is called as `build(rollout, model_cfg, parallel, dist, policy,
tokenizer)` on every rank and returns this rank's `mua.engines.engine_contract.ColocatedEngine`.
Adding an engine is its folder plus one line in `BUILTIN_ENGINES`. Core code never branches on
an engine's name to build it; it asks this registry. An engine is imported only when asked for.
An engine that reserves a fixed fraction of each GPU also defines `memory_share(rollout)` in its
builder's module (a `mua.train.memory_estimate.EngineShare`, or None when it reserves nothing);
the memory pre-flight asks `engine_memory_share`, never the engine's name.
Not here: `rollout.engine: openai` (the API agent evaluates only; it is no trainer engine).
"""

from __future__ import annotations

import os
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


def engine_memory_share(name: str, rollout):
    """The `EngineShare` the engine `name` declares for `rollout` (its builder module's
    `memory_share`), or None for an engine that holds a model copy and one trajectory's cache."""
    import importlib

    target = _all_targets().get(name)
    if target is None:
        raise UsageError(f"unknown rollout.engine {name!r}; known: {', '.join(list_engines())}")
    module = importlib.import_module(target.partition(":")[0])
    share = getattr(module, "memory_share", None)
    return share(rollout) if share is not None else None
