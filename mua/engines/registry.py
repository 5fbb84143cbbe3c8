"""Find rollout engines by name: `rollout.engine` -> its `EngineSpec` (`mua.engines.engine_spec`).

Each engine folder exports one `SPEC`; a name maps to a lazy "module:SPEC" string
(`BUILTIN_ENGINES`, one line per engine), an entry of the `mua.engines` entry-point group, or of
`MUA_ENGINES` (`name=module:attribute,...`, read in every process). A target naming a function
instead of a spec is a builder alone: an engine with no settings and no hooks. Core code never
branches on an engine's name: it reads the spec. `engine_sections` gives the models of the
`rollout.<name>` sections to `mua.config.rollout`, the layer above.
Not here: `rollout.engine: openai` (evaluation only, no trainer engine).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable

from mua.engines.engine_spec import EngineSpec
from mua.errors import UsageError
from mua.plugin_targets import load_target, with_entry_points

ENV_VAR = "MUA_ENGINES"

BUILTIN_ENGINES: dict[str, str] = {
    "hf": "mua.engines.hf.spec:SPEC",
    "sglang": "mua.engines.sglang.spec:SPEC",
    "vllm": "mua.engines.vllm.spec:SPEC",
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


def _as_spec(name: str, found) -> EngineSpec:
    """`found` (what a target names) as the spec of `name`: a spec, or a bare builder."""
    if isinstance(found, EngineSpec):
        return found if found.name == name else dataclasses.replace(found, name=name)
    if callable(found):
        return EngineSpec(name=name, build=found)
    raise UsageError(
        f"rollout.engine {name!r} names {found!r}, neither an EngineSpec nor a builder"
    )


def engine_spec(name: str) -> EngineSpec:
    """The spec registered under `name` (its module imported now)."""
    target = _all_targets().get(name)
    if target is None:
        raise UsageError(f"unknown rollout.engine {name!r}; known: {', '.join(list_engines())}")
    try:
        found = load_target(target, "SPEC")
    except (ImportError, AttributeError) as err:
        raise UsageError(
            f"rollout.engine {name!r} names {target}, which cannot be loaded "
            f"({type(err).__name__}: {err}); install its package or fix {ENV_VAR}"
        ) from None
    return _as_spec(name, found)


def engine_builder(name: str) -> Callable:
    """The builder of the engine `name`."""
    return engine_spec(name).build


def engine_sections() -> dict[str, type]:
    """The settings model of each registered engine that has one, by name: the `rollout.<name>`
    sections. Built-in specs always; a third-party one that cannot be read now is left out (its
    error comes when the engine is used)."""
    try:
        targets = _all_targets()
    except UsageError:  # a malformed MUA_ENGINES: reported where an engine is looked up
        targets = with_entry_points(BUILTIN_ENGINES, "mua.engines")
    sections = {}
    for name, target in targets.items():
        try:
            spec = _as_spec(name, load_target(target, "SPEC"))
        except Exception:
            if name in BUILTIN_ENGINES:
                raise
            continue
        if spec.settings is not None:
            sections[name] = spec.settings
    return sections


def standalone_engine(recipe, path: str, tokenizer):
    """A `RolloutEngine` of `recipe.rollout.engine` serving `path` (a model folder, hub id or
    preset), outside a trainer; one line when that engine has none."""
    name = recipe.rollout.engine
    build = engine_spec(name).standalone
    if build is None:  # an engine that runs inside a trainer only (SGLang): the hf engine
        print(f"rollout.engine={name} samples here with the hf engine, in this process", flush=True)
        build = engine_spec("hf").standalone
    return build(recipe, path, tokenizer)


def engine_memory_share(name: str, rollout):
    """The `EngineShare` the engine `name` declares for `rollout` (its `memory_share` hook), or
    None for an engine that holds a model copy and one trajectory's cache."""
    share = engine_spec(name).memory_share
    return share(rollout) if share is not None else None
