"""Moving trainer weights into SGLang servers: wire encodings and a disk path (docs/sglang.md).

Buckets (`iter_buckets`) keep at most one bucket of full tensors at once. Tensor path:
`encode_tensors` is SGLang's `MultiprocessingSerializer` form (CUDA tensors by IPC handle, same
host; CPU tensors inline), serialized per tensor-parallel rank by `tensor_push_body`;
`decode_tensors` is `mua serve`'s side. Disk path: `write_shards`/`read_shards`, safetensors shards
in shared memory for `/update_weights_from_disk`.
Not here: NCCL broadcast, resharding for TP (SGLang's loader), HTTP, the weight probe.
"""

from __future__ import annotations

import base64
import importlib
import json
import os
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from mua.engines.weight_buckets import Bucket, bucket_bytes, full_tensor, iter_buckets
from mua.errors import RunFailure

__all__ = ["Bucket", "bucket_bytes", "full_tensor", "iter_buckets"]  # and what is defined below

SHARD_INDEX = "model.safetensors.index.json"


# ---- tensor-path encoding -------------------------------------------------------------------


def _cuda_reductions_patched() -> None:
    """Apply SGLang's CUDA-IPC reductions (device by UUID, so a server that sees the GPUs under
    other indices maps them right); imported from the installed release, whose location moved."""
    for name in ("sglang.srt.utils.patch_torch", "sglang.srt.patch_torch"):
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        module.monkey_patch_torch_reductions()
        return
    raise RunFailure(
        "pushing CUDA tensors to SGLang needs sglang installed in the trainer's environment "
        "(its monkey_patch_torch_reductions); install mua[gpu] or use rollout.sglang.weight_path=disk"
    )


def encode_tensors(bucket: Bucket, as_dict: bool = False) -> str:
    """One `serialized_named_tensors` entry, in SGLang's `MultiprocessingSerializer` form: base64
    of a pickle of [(name, tensor)] (`as_dict`: {name: tensor}, the form of a LoRA adapter
    push) that its deserializer (and its safe unpickler) loads.

    CUDA tensors travel as CUDA-IPC handles (ForkingPickler with SGLang's device-UUID
    reductions): same host, and the tensors must stay alive until the server has answered. CPU
    tensors travel inline, their bytes in the payload (the standard pickle of a tensor). Sharing
    them by handle does not work here: torch's default file-descriptor sharing hands the receiver
    a connection back to this process that only a child of it may open (SGLang's scheduler is no
    child of the trainer), and its file-system sharing starts a shared-memory manager daemon that
    outlives the trainer, holding its output open while the server runs.
    """
    import io
    import pickle
    from multiprocessing.reduction import ForkingPickler

    pairs = [(name, tensor.detach()) for name, tensor in bucket]
    on_cuda = [t.is_cuda for _, t in pairs]
    buffer = io.BytesIO()
    if any(on_cuda):
        if not all(on_cuda):
            raise ValueError("a tensor bucket must be all on CUDA or all on CPU")
        _cuda_reductions_patched()
        ForkingPickler(buffer).dump(dict(pairs) if as_dict else pairs)
    else:
        pairs = [(name, t.contiguous()) for name, t in pairs]
        pickle.Pickler(buffer, protocol=pickle.HIGHEST_PROTOCOL).dump(
            dict(pairs) if as_dict else pairs
        )
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def tensor_push_body(
    bucket: Bucket, *, tp_size: int, flush_cache: bool, weight_version: str | None = None
) -> dict:
    """The `/update_weights_from_tensor` body: one payload per tensor-parallel rank, each
    serialized on its own (every TP worker opens and refcounts its own handles; one blob shared
    by all of them breaks CUDA-IPC refcounting). `weight_version`, when given, becomes the
    server's version once the push succeeded (SGLang >= 0.5.1; older releases have no field)."""
    body = {
        "serialized_named_tensors": [encode_tensors(bucket) for _ in range(max(1, int(tp_size)))],
        "load_format": None,
        "flush_cache": bool(flush_cache),
    }
    if weight_version is not None:
        body["weight_version"] = str(weight_version)
    return body


def is_cuda_bucket(bucket: Bucket) -> bool:
    """Whether a bucket's tensors travel as CUDA-IPC handles (see `encode_tensors`)."""
    return any(getattr(t, "is_cuda", False) for _, t in bucket)


# Globals a tensor payload may name: torch's rebuild functions, storages, dtypes and sizes. What
# SGLang's own safe unpickler allows for these payloads; anything else is refused.
_PAYLOAD_GLOBALS = {
    ("torch.multiprocessing.reductions", name)
    for name in (
        "rebuild_tensor",
        "rebuild_typed_storage",
        "rebuild_storage_filename",
        "rebuild_storage_fd",
        "rebuild_storage_empty",
        "rebuild_cuda_tensor",
    )
} | {
    ("torch", "Tensor"),
    ("torch", "Size"),
    ("torch", "device"),
    ("torch", "UntypedStorage"),
    ("torch.storage", "UntypedStorage"),
    ("torch.storage", "TypedStorage"),
    ("torch.nn.parameter", "Parameter"),
    ("multiprocessing.resource_sharer", "DupFd"),
    ("builtins", "list"),
    ("builtins", "tuple"),
    ("collections", "OrderedDict"),
    ("torch._utils", "_rebuild_tensor_v2"),
    ("torch._tensor", "_rebuild_from_type_v2"),
}


def decode_tensors(payload: str, as_dict: bool = False) -> Bucket:
    """The server side of `encode_tensors` (what `mua serve` does with a push): a restricted
    unpickle that only rebuilds tensors (as SGLang's safe unpickler), then copies them.
    `as_dict`: the payload holds {name: tensor} (a LoRA adapter push); pairs come back."""
    import io
    import pickle

    import torch

    def load_storage(data: bytes):  # torch's own storage bytes, loaded without running code
        return torch.load(io.BytesIO(data), weights_only=True)

    class TensorUnpickler(pickle.Unpickler):
        def find_class(self, module: str, name: str):
            if (module, name) == ("torch.storage", "_load_from_bytes"):
                return load_storage
            value = getattr(torch, name, None) if module == "torch" else None
            if (module, name) in _PAYLOAD_GLOBALS or isinstance(value, torch.dtype):
                return super().find_class(module, name)
            raise pickle.UnpicklingError(f"a tensor payload may not name {module}.{name}")

    try:
        raw = base64.b64decode(payload, validate=True)
        pairs = TensorUnpickler(io.BytesIO(raw)).load()
    except Exception as err:
        raise ValueError(
            f"serialized_named_tensors entry is not a serialized tensor list: {err}"
        ) from err
    if as_dict:
        if not isinstance(pairs, dict) or not all(
            isinstance(t, torch.Tensor) for t in pairs.values()
        ):
            raise ValueError("serialized tensors of an adapter must hold a {name: tensor} dict")
        pairs = list(pairs.items())
    if not isinstance(pairs, list) or not all(
        isinstance(p, tuple) and len(p) == 2 and isinstance(p[1], torch.Tensor) for p in pairs
    ):
        raise ValueError("serialized_named_tensors entry must hold a list of (name, tensor)")
    return [(str(name), tensor.clone()) for name, tensor in pairs]


# ---- disk path ------------------------------------------------------------------------------


def default_shm_root() -> Path:
    """/dev/shm when it exists (RAM-backed, no disk I/O), else the temp folder."""
    shm = Path("/dev/shm")
    return shm if shm.is_dir() and os.access(shm, os.W_OK) else Path(tempfile.gettempdir())


def new_weights_dir(root: str | Path | None = None) -> Path:
    base = Path(root) if root else default_shm_root()
    base.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix="mua-weights-", dir=base))


def write_shards(
    named_tensors: Iterable[tuple[str, Any]],
    folder: str | Path,
    bucket_mb: float,
    hf_config: Any = None,
) -> list[Path]:
    """Write the weights bucket by bucket as safetensors shards plus an HF-style index.

    `hf_config` (a transformers config) is saved as config.json when given, which loaders that
    expect a full model folder need. Returns the shard paths.
    """
    from safetensors.torch import save_file

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    shards: list[Path] = []
    weight_map: dict[str, str] = {}
    for index, bucket in enumerate(iter_buckets(named_tensors, bucket_mb), start=1):
        path = folder / f"model-{index:05d}.safetensors"
        save_file(
            {n: t.to("cpu").contiguous() for n, t in bucket}, str(path), metadata={"format": "pt"}
        )
        shards.append(path)
        weight_map.update({name: path.name for name, _ in bucket})
    (folder / SHARD_INDEX).write_text(
        json.dumps({"metadata": {}, "weight_map": weight_map}, indent=1)
    )
    if hf_config is not None:
        hf_config.to_json_file(str(folder / "config.json"))
    return shards


def read_shards(folder: str | Path) -> Iterator[Bucket]:
    """Yield the weights of every *.safetensors file in `folder`, one file (bucket) at a time."""
    from safetensors.torch import load_file

    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(f"weights folder {folder} does not exist")
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"weights folder {folder} holds no .safetensors files")
    for path in files:
        yield list(load_file(str(path)).items())
