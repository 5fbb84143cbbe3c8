"""The `sglang` engine as mua registers it: its `rollout.sglang` model and its hooks
(`EngineSpec`). It runs inside a trainer only (no `standalone`: `mua eval` samples with hf). The
launch check and building live in `colocated`."""

from __future__ import annotations

from mua.engines.engine_spec import EngineSpec, lazy
from mua.engines.sglang.settings import SGLangConfig


def check_train(recipe) -> None:
    """An adapter push of LoRA embeddings is refused (one line)."""
    lora = recipe.model.lora
    if lora is not None and lora.embeddings and recipe.rollout.lora_sync == "adapter":
        raise ValueError(
            "model.lora.embeddings=true cannot push its adapter to SGLang (releases before "
            "the tied-head LoRA support refuse embed_tokens/lm_head adapters, and mua's push "
            "is not checked against the later ones); set rollout.lora_sync=merged or "
            "model.lora.embeddings=false"
        )


def routed_experts(rollout) -> None:
    """SGLang >= 0.5.23 returns each token's routed experts; an older release is refused before
    launch (`colocated.check_launch`), where the release is known."""
    return None


def memory_share(rollout):
    """What a server reserves of each GPU, for the memory pre-flight."""
    from mua.engines.engine_contract import EngineShare

    cfg = rollout.sglang
    return EngineShare(
        fraction=cfg.mem_fraction,
        setting="rollout.sglang.mem_fraction",
        dtype=cfg.dtype,
        tp_size=cfg.tp_size,
        kv_fix="rollout.sglang.mem_fraction or rollout.sglang.tp_size",
    )


SPEC = EngineSpec(
    name="sglang",
    settings=SGLangConfig,
    build=lazy("mua.engines.sglang.colocated:build"),
    check_train=check_train,
    check_launch=lazy("mua.engines.sglang.colocated:check_launch"),
    memory_share=memory_share,
    routed_experts=routed_experts,
    doctor=lazy("mua.engines.sglang.install_check:install_check"),
)
