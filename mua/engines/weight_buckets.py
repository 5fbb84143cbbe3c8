"""Full tensors in buckets, for any engine's weight push.

`iter_buckets` gathers full tensors one at a time from an iterator of (name, tensor) (a sharded
DTensor is gathered with `full_tensor()`) and groups them into buckets of at most `bucket_mb`,
so at most one bucket of full tensors exists at once: never a full-model copy.
Not here: how a bucket travels (each engine's folder).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

Bucket = list[tuple[str, Any]]


def full_tensor(tensor):
    """The whole tensor on this rank: gathers a DTensor, detaches anything else."""
    if hasattr(tensor, "full_tensor"):
        tensor = tensor.full_tensor()
    return tensor.detach()


def iter_buckets(named_tensors: Iterable[tuple[str, Any]], bucket_mb: float) -> Iterator[Bucket]:
    """Yield lists of (name, full tensor) whose sizes add up to at most `bucket_mb` MiB.

    A single tensor larger than the limit forms a bucket of its own. Tensors are gathered lazily,
    as the bucket they belong to is filled.
    """
    if bucket_mb <= 0:
        raise ValueError("bucket_mb must be positive")
    limit_bytes = int(bucket_mb * 1024 * 1024)
    bucket: Bucket = []
    size_bytes = 0
    for name, tensor in named_tensors:
        tensor = full_tensor(tensor)
        nbytes = tensor.numel() * tensor.element_size()
        if bucket and size_bytes + nbytes > limit_bytes:
            yield bucket
            bucket, size_bytes = [], 0
        bucket.append((name, tensor))
        size_bytes += nbytes
    if bucket:
        yield bucket


def bucket_bytes(bucket: Bucket) -> int:
    return sum(t.numel() * t.element_size() for _, t in bucket)
