"""Full-weight pushes to a vLLM server on the trainer's GPU, through vLLM's weight-transfer routes.

`push_ipc` sends the trainer's tensors bucket by bucket (`mua.engines.weight_buckets`) as CUDA IPC
handles, pickled and base64-encoded (`ipc_handles_pickled`), between `/start_weight_update` and
`/finish_weight_update` (routes and payloads: docs/vllm.md). A bucket's tensors stay alive until
the server answered its `/update_weights`, since it reads them in place. The iterator always runs
to its end (its gathers are collective), even after a failed call; then `RunFailure` is raised and
the caller marks the engine broken.
Not here: the file path (`vllm_engine`), NCCL transfer to a server on another machine.
"""

from __future__ import annotations

import base64
import pickle
from typing import Any

from mua.errors import RunFailure

IPC_INIT = {"init_info": {"packed": False}}


def dtype_name(tensor) -> str:
    """`torch.bfloat16` -> "bfloat16", as vLLM's update info names dtypes."""
    return str(tensor.dtype).rpartition(".")[2]


def ipc_handle(tensor) -> dict[str, tuple]:
    """{this GPU's UUID: rebuild args} of a CUDA tensor, as vLLM's ipc backend reads it."""
    import torch
    from torch.multiprocessing.reductions import reduce_tensor

    _rebuild, args = reduce_tensor(tensor)
    return {str(torch.cuda.get_device_properties(tensor.device).uuid): args}


def ipc_update_info(bucket, handle=None) -> tuple[dict[str, Any], list]:
    """The `/update_weights` body of one bucket of (name, CUDA tensor), and the tensors that must
    stay alive until the server answered it (`handle`: `ipc_handle` unless given)."""
    handle = handle or ipc_handle
    kept = [t.contiguous() for _, t in bucket]
    info = {
        "names": [name for name, _ in bucket],
        "dtype_names": [dtype_name(t) for t in kept],
        "shapes": [list(t.shape) for t in kept],
        "ipc_handles_pickled": base64.b64encode(pickle.dumps([handle(t) for t in kept])).decode(
            "ascii"
        ),
    }
    return {"update_info": info}, kept


async def push_ipc(
    call, named_tensors, version: str, bucket_mb: float, handle=None, init: bool = False
) -> int:
    """Send every tensor of `named_tensors` through `call(method, path, body)` (the engine's HTTP
    call), after `/init_weight_transfer_engine` when `init`; returns how many were sent.
    RunFailure, after the iterator ran to its end, when any call failed or no tensor came."""
    from mua.engines.weight_buckets import iter_buckets

    failure: RunFailure | None = None
    count = 0
    try:
        if init:
            await call("POST", "/init_weight_transfer_engine", IPC_INIT)
        await call("POST", "/start_weight_update")
    except RunFailure as err:
        failure = err
    for bucket in iter_buckets(named_tensors, bucket_mb):
        if failure is not None:
            continue  # keep gathering: the other ranks' collectives wait for this one
        _synchronize()
        body, kept = ipc_update_info(bucket, handle)
        try:
            await call("POST", "/update_weights", body)
            count += len(kept)
        except RunFailure as err:
            failure = err
        del kept
    if failure is None and count == 0:
        failure = RunFailure("a full weight push carried no tensors")
    if failure is None:
        try:
            await call("POST", "/finish_weight_update", {"weight_version": str(version)})
        except RunFailure as err:
            failure = err
    if failure is not None:
        raise failure
    return count


def _synchronize() -> None:
    """Wait for the kernels that produced the bucket (the gathers) before the server reads it."""
    try:
        import torch
    except ImportError:
        return
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()
