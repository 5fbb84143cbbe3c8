"""The `vllm` engine as mua registers it: its `rollout.vllm` model and its hooks (`EngineSpec`).
The hooks read only the recipe; building, launching and serving live in `colocated`."""

from __future__ import annotations

from mua.engines.engine_spec import EngineSpec, lazy
from mua.engines.vllm.settings import VLLMConfig


def check_chosen(rollout) -> None:
    """`rollout.engine=vllm` needs a server: one to launch (`python`) or running ones."""
    if not (rollout.vllm.python or rollout.vllm.base_urls):
        raise ValueError(
            "rollout.engine=vllm needs rollout.vllm.python (the Python of a venv with vLLM, "
            "e.g. tests/.vllm/0.32.0/venv/bin/python from `make vllm-releases`) or "
            "rollout.vllm.base_urls (running servers)"
        )


def check_launch(recipe) -> None:
    """A server to launch needs a Python that imports vLLM (one line, before torchrun starts)."""
    cfg = recipe.rollout.vllm
    if not cfg.base_urls:
        from mua.engines.vllm.vllm_launch import check_python

        check_python(cfg.python)


def memory_share(rollout):
    """What a launched server reserves of its GPU, for the memory pre-flight; None for servers
    elsewhere (`base_urls`)."""
    from mua.engines.engine_contract import EngineShare

    cfg = rollout.vllm
    if cfg.base_urls:
        return None
    return EngineShare(
        fraction=cfg.gpu_memory_utilization,
        setting="rollout.vllm.gpu_memory_utilization",
        dtype=cfg.dtype,
    )


def routed_experts(rollout) -> str | None:
    """vLLM returns routed experts when asked (docs/moe.md)."""
    if rollout.vllm.routed_experts:
        return None
    return "set rollout.vllm.routed_experts=true (vLLM on CUDA: its CPU build cannot return them)"


SPEC = EngineSpec(
    name="vllm",
    settings=VLLMConfig,
    build=lazy("mua.engines.vllm.colocated:build"),
    check_chosen=check_chosen,
    check_launch=check_launch,
    standalone=lazy("mua.engines.vllm.colocated:standalone"),
    memory_share=memory_share,
    routed_experts=routed_experts,
)
