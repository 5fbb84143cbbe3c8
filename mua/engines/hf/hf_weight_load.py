"""Copying pushed full weights into the hf engine's model, checked by name and shape.

Names may carry the wrappers of a trainer's model (DDP's `module.`, `torch.compile`'s
`_orig_mod.`, FSDP and activation checkpointing wrappers): they are stripped before matching.
Tensors may come as a dict, an iterable of (name, tensor) pairs, or buckets of either.
What this module does not do: hold the engine's locks, clear its kept KV (the engine does both
around the copy) or apply LoRA adapters (`hf_adapters`).
"""

from __future__ import annotations

from typing import Any

_PREFIXES = ("module.", "_orig_mod.", "_fsdp_wrapped_module.", "_checkpoint_wrapped_module.")


def copy_named_weights(model, named_tensors: Any) -> None:
    """Copy each named tensor into `model`'s parameter or buffer of that name, in place, cast to
    its device and dtype; ValueError naming the tensor for an unknown name or another shape."""
    import torch

    targets = dict(model.named_parameters(remove_duplicate=False))
    targets.update(dict(model.named_buffers(remove_duplicate=False)))
    with torch.no_grad():
        for name, tensor in flatten_named(named_tensors):
            key = name
            for prefix in _PREFIXES:
                key = key.replace(prefix, "")
            target = targets.get(key)
            if target is None:
                raise ValueError(f"update_weights: the engine's model has no weight named {name!r}")
            if tuple(target.shape) != tuple(tensor.shape):
                raise ValueError(
                    f"update_weights: {name!r} has shape {tuple(tensor.shape)}, "
                    f"the engine expects {tuple(target.shape)}"
                )
            target.copy_(tensor.detach().to(device=target.device, dtype=target.dtype))


def flatten_named(items: Any):
    """Yield (name, tensor) from a dict, an iterable of pairs, or an iterable of such buckets."""
    if isinstance(items, dict):
        yield from items.items()
        return
    for item in items:
        if isinstance(item, dict):
            yield from item.items()
        elif isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], str):
            yield item
        else:
            yield from flatten_named(item)
