"""Process-group setup and the few collectives the trainer needs (sums, object gathers).

Works the same for 1 process without torchrun (no group is created; collectives are identity)
and for N processes under torchrun (gloo on CPU, NCCL on GPU). Does not shard models: see
`mua.distributed.fsdp`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist


@dataclass
class DistInfo:
    rank: int
    world_size: int
    local_rank: int
    device: torch.device
    backend: str
    mesh: object | None = None  # DeviceMesh over all ranks (1-D, data parallel + FSDP)

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def init_distributed(timeout_s: float = 600.0) -> DistInfo:
    """Join the torchrun process group (or run single-process) and build a 1-D DeviceMesh."""
    from torch.distributed.device_mesh import init_device_mesh

    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    use_cuda = torch.cuda.is_available()
    if use_cuda:
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")
    backend = "nccl" if use_cuda else "gloo"
    if "MASTER_ADDR" not in os.environ:
        # A plain `python -m mua.train.loop` run: a private single-process group so that
        # FSDP2 and DCP take exactly the code path they take under torchrun.
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", str(_free_port()))
    if not dist.is_initialized():
        dist.init_process_group(
            backend=backend, rank=rank, world_size=world, timeout=timedelta(seconds=timeout_s)
        )
    mesh = init_device_mesh(device.type, (world,), mesh_dim_names=("dp",))
    return DistInfo(rank, world, local_rank, device, backend, mesh)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ready() -> bool:
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def all_reduce_sum(
    values: list[float] | torch.Tensor, device: torch.device | None = None
) -> torch.Tensor:
    """Sum a small vector over ranks (float64 so counts stay exact)."""
    t = torch.as_tensor(values, dtype=torch.float64, device=device or "cpu").clone()
    if _ready():
        if dist.get_backend() == "nccl" and t.device.type != "cuda":
            t = t.cuda()
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return t.cpu()


def all_reduce_max(values: list[float]) -> torch.Tensor:
    t = torch.as_tensor(values, dtype=torch.float64).clone()
    if _ready():
        if dist.get_backend() == "nccl":
            t = t.cuda()
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.cpu()


def all_gather_objects(obj) -> list:
    """Every rank's `obj`, in rank order, on every rank."""
    if not _ready():
        return [obj]
    out = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj)
    return out


def broadcast_object(obj, src: int = 0):
    if not _ready():
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=src)
    return box[0]


def barrier() -> None:
    if _ready():
        dist.barrier()


def destroy() -> None:
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
