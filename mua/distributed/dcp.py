"""torch.distributed.checkpoint (DCP) save/load of a sharded model and its optimizer.

The state dict written has two top-level keys: `model` (HF parameter names -> tensors) and,
when an optimizer is given, `optim`. Each rank writes its own shards; any world size can load
them back (DCP reshards). Layout, atomic renames and trainer state live in
`mua.train.checkpoint`; this module only moves tensors.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn


def _options(ignore_frozen: bool = False):
    """`ignore_frozen`: only parameters that require gradients are saved and loaded (a LoRA
    run's adapters; the frozen base is rebuilt from the model it names)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions

    if ignore_frozen:
        return StateDictOptions(full_state_dict=False, ignore_frozen_params=True, strict=False)
    return StateDictOptions(full_state_dict=False)


def save_dcp(
    path: str | Path,
    model: nn.Module,
    optimizer: torch.optim.Optimizer | None,
    ignore_frozen: bool = False,
) -> None:
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_state_dict

    options = _options(ignore_frozen)
    if optimizer is not None:
        model_sd, optim_sd = get_state_dict(model, optimizer, options=options)
        state = {"model": _trainable_only(model, model_sd, ignore_frozen), "optim": optim_sd}
    else:
        model_sd = get_model_state_dict(model, options=options)
        state = {"model": _trainable_only(model, model_sd, ignore_frozen)}
    dcp.save(state, checkpoint_id=str(path))


def _trainable_only(model: nn.Module, state: dict, ignore_frozen: bool) -> dict:
    """`state` without frozen tensors: `ignore_frozen_params` keeps a frozen weight tied to
    another (the output head of tied embeddings) under its second name."""
    if not ignore_frozen:
        return state
    trainable = {name for name, p in model.named_parameters() if p.requires_grad}
    return {k: v for k, v in state.items() if k in trainable}


def load_dcp(
    path: str | Path,
    model: nn.Module,
    optimizer: torch.optim.Optimizer | None,
    ignore_frozen: bool = False,
) -> None:
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import (
        get_model_state_dict,
        get_state_dict,
        set_model_state_dict,
        set_state_dict,
    )

    options = _options(ignore_frozen)
    if optimizer is not None:
        model_sd, optim_sd = get_state_dict(model, optimizer, options=options)
        state = {"model": _trainable_only(model, model_sd, ignore_frozen), "optim": optim_sd}
        dcp.load(state, checkpoint_id=str(path))
        set_state_dict(
            model,
            optimizer,
            model_state_dict=state["model"],
            optim_state_dict=state["optim"],
            options=options,
        )
    else:
        model_sd = get_model_state_dict(model, options=options)
        state = {"model": _trainable_only(model, model_sd, ignore_frozen)}
        dcp.load(state, checkpoint_id=str(path))
        set_model_state_dict(model, state["model"], options=options)
