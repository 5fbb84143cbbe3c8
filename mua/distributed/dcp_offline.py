"""Read the model tensors of a DCP checkpoint in one plain process (no process group).

`read_model_state(path)` returns the full, unsharded tensors saved under the checkpoint's
`model` key, named as in the model (`model.layers.0...`, `lm_head.weight`), on CPU. Shards
written by any number of ranks are reassembled by DCP itself. This is what `mua merge` uses;
optimizer state is never read (it can be several times larger than the model).
Does not write checkpoints (see `mua.distributed.dcp`) or build models.
"""

from __future__ import annotations

from pathlib import Path

import torch

MODEL_KEY = "model"


def checkpoint_tensor_shapes(
    path: str | Path, prefix: str = MODEL_KEY
) -> dict[str, tuple[torch.Size, torch.dtype]]:
    """{name under `prefix`: (shape, dtype)} of the tensors stored in a DCP checkpoint."""
    from torch.distributed.checkpoint import FileSystemReader
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    metadata = FileSystemReader(str(path)).read_metadata()
    head = prefix + "."
    shapes = {}
    for key, meta in metadata.state_dict_metadata.items():
        if key.startswith(head) and isinstance(meta, TensorStorageMetadata):
            shapes[key[len(head) :]] = (meta.size, meta.properties.dtype)
    return shapes


def read_model_state(path: str | Path, prefix: str = MODEL_KEY) -> dict[str, torch.Tensor]:
    """Full tensors of `prefix` (default: the model) from the DCP checkpoint at `path`."""
    import warnings

    import torch.distributed.checkpoint as dcp

    shapes = checkpoint_tensor_shapes(path, prefix)
    if not shapes:
        raise ValueError(f"{path}: the checkpoint holds no tensors under {prefix!r}")
    state = {name: torch.empty(size, dtype=dtype) for name, (size, dtype) in shapes.items()}
    with warnings.catch_warnings():  # "assuming ... a single process" is exactly the intent
        warnings.filterwarnings("ignore", message=".*single process.*")
        dcp.load({prefix: state}, checkpoint_id=str(path), no_dist=True)
    return state
