"""FSDP2 wrapping of Hugging Face causal LMs and gathering of their full weights.

`shard_model` applies `fully_shard` to every decoder block, then the root (bf16 compute with fp32
reductions on GPU, optional activation checkpointing and CPU offload), or leaves one float32 rank
without offload plain (`needs_fsdp`). `iter_full_params` yields full tensors with their HF names
one at a time (`fully_shard` adds no prefixes). Not here: building models or optimizers.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import torch
from torch import nn


def decoder_blocks(model: nn.Module) -> list[nn.Module]:
    """The repeated transformer blocks of an HF model (`model.layers`, `transformer.h`, ...)."""
    for name in (
        "model.layers",
        "model.model.layers",
        "base_model.model.model.layers",  # a peft (LoRA) model around an HF causal LM
        "transformer.h",
        "gpt_neox.layers",
        "layers",
    ):
        node = model
        for part in name.split("."):
            node = getattr(node, part, None)
            if node is None:
                break
        if isinstance(node, nn.ModuleList) and len(node):
            return list(node)
    raise ValueError(f"cannot find the decoder blocks of {type(model).__name__}")


def compute_dtype(mixed_precision: str, device: torch.device) -> torch.dtype:
    if mixed_precision == "bf16" or (mixed_precision == "auto" and device.type == "cuda"):
        return torch.bfloat16
    return torch.float32


def needs_fsdp(world_size: int, dtype: torch.dtype, cpu_offload: bool) -> bool:
    """False for one rank computing in float32 without offload: there FSDP2 shards nothing and
    casts nothing, and would only copy every parameter and gradient through a one-rank
    collective at each forward and backward, a cost with no benefit. The plain module trains the
    same numbers."""
    return world_size > 1 or dtype != torch.float32 or cpu_offload


def shard_model(
    model: nn.Module,
    mesh,
    *,
    mixed_precision: str = "auto",
    activation_checkpointing: bool = False,
    cpu_offload: bool = False,
    trainable: bool = True,
) -> nn.Module:
    """fully_shard each block, then the root; returns the same (now sharded) module, or the
    plain module where FSDP2 would shard nothing (`needs_fsdp`)."""
    from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard

    device = torch.device(mesh.device_type)
    dtype = compute_dtype(mixed_precision, device)
    kwargs: dict = {"mesh": mesh}
    if dtype != torch.float32:
        kwargs["mp_policy"] = MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=torch.float32)
    if cpu_offload:
        kwargs["offload_policy"] = CPUOffloadPolicy()
    if activation_checkpointing and trainable and hasattr(model, "gradient_checkpointing_enable"):
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if not cpu_offload:
        model.to(device)
    if needs_fsdp(mesh.size(), dtype, cpu_offload):
        for block in decoder_blocks(model):
            fully_shard(block, **kwargs)
        fully_shard(model, **kwargs)
    if not trainable:
        model.requires_grad_(False)
        model.eval()
    return model


def iter_full_params(
    model: nn.Module, keep: Callable[[str], bool] | None = None
) -> Iterator[tuple[str, torch.Tensor]]:
    """(HF name, full tensor on CPU) for every parameter and buffer-free weight, in a fixed order
    (only those whose name `keep` accepts, when given: the others are not gathered).

    Every rank must iterate in lock-step: each DTensor gather is a collective. With one rank
    (and CPU parameters) the tensors are the parameters' own storage, not copies: use them
    before the next optimizer step changes them (pushes and exports do).
    """
    for name, param in model.named_parameters():
        if keep is not None and not keep(name):
            continue
        data = param.detach()
        if hasattr(data, "full_tensor"):
            # one rank holds the whole tensor: no collective (one per tensor) is needed
            data = data.to_local() if data.device_mesh.size() == 1 else data.full_tensor()
        yield name, data.cpu()


def full_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """All parameters gathered to full CPU tensors on every rank (tied weights appear once)."""
    return dict(iter_full_params(model))


def clip_grad_norm(model: nn.Module, max_norm: float | None) -> float:
    """Global grad norm over all shards (and clip when max_norm is set)."""
    params = [p for p in model.parameters() if p.grad is not None]
    if not params:
        return 0.0
    if max_norm is None:
        max_norm = float("inf")
    norm = torch.nn.utils.clip_grad_norm_(params, max_norm)
    if hasattr(norm, "full_tensor"):
        norm = norm.full_tensor()
    return float(norm)
