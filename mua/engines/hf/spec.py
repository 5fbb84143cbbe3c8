"""The `hf` engine as mua registers it (`EngineSpec`): no recipe section, nothing to launch; it
holds a model copy per rank and returns each token's routed experts. Building and the standalone
engine live in `colocated`."""

from __future__ import annotations

from mua.engines.engine_spec import EngineSpec, lazy


def routed_experts(rollout) -> None:
    """The hf engine always records them."""
    return None


SPEC = EngineSpec(
    name="hf",
    build=lazy("mua.engines.hf.colocated:build"),
    standalone=lazy("mua.engines.hf.colocated:standalone"),
    routed_experts=routed_experts,
)
