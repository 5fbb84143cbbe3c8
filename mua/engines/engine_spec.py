"""What an engine folder declares to mua: one `EngineSpec` (its `SPEC`), registered in
`mua.engines.registry` by one "module:SPEC" line.

A spec names the engine, the model of its recipe section (`rollout.<name>`) and its hooks; every
hook but `build` is optional. Hooks are lazy "module:function" targets wrapped by `lazy`, so
reading a spec imports only its settings model. When the trainer pushes weights (after each
update, or at the next use) is not here: a built engine says it (`ColocatedEngine.push_on_update`),
since it can depend on how its server was started. Not here: the lookup by name (`registry`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mua.plugin_targets import load_target


@dataclass(frozen=True)
class EngineSpec:
    """One rollout engine. Hooks (all but `build` may be None):

    - `build(rollout, model_cfg, parallel, dist, policy, tokenizer)`: the rank's `ColocatedEngine`.
    - `settings`: the pydantic model of the `rollout.<name>` section (None: the engine has none).
    - `check_chosen(rollout)`: recipe validation while `rollout.engine` is this engine; raises
      ValueError (one line).
    - `check_train(recipe)`: a train recipe's cross-section rules for this engine (ValueError).
    - `check_launch(recipe)`: before torchrun starts; raises UsageError (one line).
    - `standalone(recipe, path, tokenizer)`: a `RolloutEngine` for `mua eval` / `mua rollout`;
      None: those sample with the hf engine.
    - `memory_share(rollout)`: the `EngineShare` of each GPU it reserves (memory pre-flight), or
      None for an engine holding a model copy and one trajectory's cache.
    - `routed_experts(rollout)`: None when the engine returns each token's routed experts (for
      `algo.routing_replay=r3`), else the one-line fix that turns them on; unset: it never does.
    - `doctor(has_cuda)`: `mua doctor`'s (status, detail) of what the engine needs installed.
    """

    name: str
    build: Callable[..., Any]
    settings: type | None = None
    check_chosen: Callable[[Any], None] | None = None
    check_train: Callable[[Any], None] | None = None
    check_launch: Callable[[Any], None] | None = None
    standalone: Callable[..., Any] | None = None
    memory_share: Callable[[Any], Any] | None = None
    routed_experts: Callable[[Any], str | None] | None = None
    doctor: Callable[[bool], tuple[str, str]] | None = None


def lazy(target: str) -> Callable[..., Any]:
    """A function calling the one "module:function" `target` names, imported at the first call."""
    module, _, attr = target.partition(":")

    def call(*args, **kwargs):
        return load_target(target, attr)(*args, **kwargs)

    call.__module__, call.__name__, call.__qualname__ = module, attr, attr
    return call
