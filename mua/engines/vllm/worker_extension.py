"""Runs inside vLLM's worker process (`--worker-extension-cls`): exact full-weight pushes.

vLLM imports this module in its own Python, so it imports only torch, safetensors and vllm. The
trainer writes safetensors files into a folder and calls `mua_load_weights(folder)` through
`/collective_rpc`: vLLM's layer-wise reload, then every CPU-packed linear layer (`cpu_linear`) and
CPU MoE kernel is packed again from its current weight (why: docs/vllm.md). Every file is read
before the model is touched and every parameter must be loaded; a push that fails part-way marks
the model broken (its forward raises, naming the push).
Not here: LoRA adapters (vLLM's own `/v1/load_lora_adapter`), the GPU weight-transfer path.
"""

from __future__ import annotations

import glob
import os


class MuaWorkerExtension:
    """Mixed into vLLM's worker class: `self.model_runner` is the worker's model runner."""

    _mua_broken: str | None = None

    def mua_load_weights(self, folder: str) -> dict:
        """Load every `*.safetensors` file of `folder` into the running model, then re-pack the
        layers whose packed copy a reload leaves stale. Returns {"loaded": n, "repacked": m}."""
        if self._mua_broken:
            raise RuntimeError(
                f"mua: this engine is broken by an earlier push ({self._mua_broken})"
            )
        tensors = _read_folder(folder)  # every file read before the model is touched
        runner = self.model_runner
        model = runner.get_model()
        try:
            loaded = _reload(runner, model, tensors)
            repacked = _repack_kept_weights(model) + _prepack_moe_experts(model)
        except Exception as err:
            self._mark_broken(model, f"{type(err).__name__}: {err}")
            raise
        return {"loaded": len(loaded), "repacked": repacked}

    def mua_weight_names(self) -> list[str]:
        """The model's parameter names as vLLM holds them (for diagnostics)."""
        return [n for n, _ in self.model_runner.get_model().named_parameters()]

    def _mark_broken(self, model, reason: str) -> None:
        self._mua_broken = reason

        def refuse(*_args, **_kwargs):
            raise RuntimeError(f"mua: a weight push failed and left this engine broken ({reason})")

        model.register_forward_pre_hook(refuse)


def _read_folder(folder: str) -> list:
    from safetensors.torch import load_file

    files = sorted(glob.glob(os.path.join(folder, "*.safetensors")))
    if not files:
        raise FileNotFoundError(f"mua: no *.safetensors file in {folder}")
    tensors = []
    for path in files:
        tensors.extend(load_file(path, device="cpu").items())
    return tensors


def _reload(runner, model, tensors) -> set:
    """vLLM's layer-wise in-place reload from `tensors`; every parameter must be loaded."""
    from vllm.model_executor.model_loader.reload import (
        finalize_layerwise_reload,
        initialize_layerwise_reload,
    )

    lora = runner.vllm_config.lora_config is not None
    wanted = {
        name.replace(".base_layer.", ".") if lora else name for name, _ in model.named_parameters()
    }
    initialize_layerwise_reload(model)
    loaded = model.load_weights(iter(tensors))
    finalize_layerwise_reload(model, runner.vllm_config.model_config)
    for reset in ("reset_lora_state", "reset_encoder_cache", "reset_mm_cache"):
        if hasattr(runner, reset):
            getattr(runner, reset)()
    missing = wanted - set(loaded or ())
    if loaded is not None and missing:
        raise ValueError(
            f"mua: the push did not set {len(missing)} parameter(s): {sorted(missing)[:5]}"
        )
    return set(loaded or ())


def _prepack_moe_experts(model) -> int:
    """Pack again the experts of every mixture-of-experts layer run by vLLM's CPU MoE kernel: its
    first load packs them into the kernel's grouped-gemm layout, a reload (a weight update) skips
    that step and leaves the plain weights where the kernel reads packed ones."""
    count = 0
    for module in model.modules():
        kernel = getattr(getattr(module, "quant_method", None), "moe_kernel", None)
        experts = getattr(kernel, "fused_experts", None)
        if experts is None or not type(experts).__module__.endswith(".cpu_moe"):
            continue
        experts.process_weights_after_loading(module)
        count += 1
    return count


def _repack_kept_weights(model) -> int:
    """Pack again every layer holding both a plain 2-D weight and a packed copy (CPU only)."""
    from vllm.model_executor.layers.utils import dispatch_cpu_unquantized_gemm

    count = 0
    for module in model.modules():
        weight = getattr(module, "weight", None)
        if not hasattr(module, "cpu_linear") or weight is None:
            continue
        if weight.ndim == 2 and weight.numel() > 0 and not weight.is_meta:
            dispatch_cpu_unquantized_gemm(module, remove_weight=False)
            count += 1
    return count
