"""Everything that touches torch.distributed: process groups, DeviceMesh, FSDP2, DCP.

No other package in mua imports torch.distributed; they call the helpers re-exported here.
This package knows nothing about recipes beyond the small options it is handed.
"""

from mua.distributed.runtime import (
    DistInfo,
    all_gather_objects,
    all_reduce_max,
    all_reduce_sum,
    barrier,
    broadcast_object,
    destroy,
    init_distributed,
)

__all__ = [
    "DistInfo",
    "all_gather_objects",
    "all_reduce_max",
    "all_reduce_sum",
    "barrier",
    "broadcast_object",
    "destroy",
    "init_distributed",
]
