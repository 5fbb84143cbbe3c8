"""One torchrun rank of B4: shard a model as the trainer does, take one step, count local bytes.

Run as `python -m torch.distributed.run --standalone --nproc-per-node=N -m bench._fsdp_memory_worker
OUT.json MODEL`. Every rank builds the policy (`mua.models.model_loading` + `mua.distributed.fsdp.shard_model`),
the optimizer (`mua.train.optim.build_optimizer`) and takes one real step (`mua.train.sft.sft_step`),
so gradients and AdamW state exist, then counts the bytes this rank holds for parameters, gradients
and optimizer state. Bytes are counted per distinct storage, so FSDP's shard padding is included
and a tied weight counts once. Rank 0 writes every rank's counts to OUT.json.
Does not measure process RSS (the Python and library overhead is the same for any model size).
"""

from __future__ import annotations

import json
import sys


def _storage_bytes(tensors, seen: set[int]) -> int:
    total = 0
    for t in tensors:
        if t is None:
            continue
        if hasattr(t, "to_local"):
            t = t.to_local()
        storage = t.untyped_storage()
        if storage.data_ptr() in seen:
            continue
        seen.add(storage.data_ptr())
        total += storage.nbytes()
    return total


def local_bytes(model, optimizer) -> dict[str, int]:
    seen: set[int] = set()
    params = list(model.parameters())
    state = [
        v
        for s in optimizer.state.values()
        for v in s.values()
        if hasattr(v, "untyped_storage") and v.dim() > 0
    ]
    return {
        "param_bytes": _storage_bytes(params, seen),
        "grad_bytes": _storage_bytes([p.grad for p in params], seen),
        "optim_bytes": _storage_bytes(state, seen),
    }


def main(out_path: str, model_path: str) -> None:
    import torch

    from mua.config.train import OptimConfig
    from mua.distributed import all_gather_objects, barrier, destroy, init_distributed
    from mua.distributed.fsdp import shard_model
    from mua.models import load_model
    from mua.train.data import SFTSample
    from mua.train.optim import build_optimizer, build_scheduler
    from mua.train.sft import sft_step

    torch.set_num_threads(1)
    dist = init_distributed()
    try:
        model = shard_model(
            load_model(model_path, dtype="float32", seed=0), dist.mesh, mixed_precision="fp32"
        )
        cfg = OptimConfig()
        optimizer = build_optimizer(model.parameters(), cfg)
        scheduler = build_scheduler(optimizer, cfg, total_steps=1)
        batch = [SFTSample(list(range(3 + i, 67 + i)), [0] * 16 + [1] * 48) for i in range(4)]
        sft_step(
            model,
            optimizer,
            scheduler,
            batch,
            rank=dist.rank,
            world_size=dist.world_size,
            token_budget=4096,
            grad_clip=cfg.grad_clip,
            device=dist.device,
        )
        counts = all_gather_objects(local_bytes(model, optimizer))
        if dist.is_main:
            with open(out_path, "w") as f:
                json.dump({"world_size": dist.world_size, "ranks": counts}, f)
        barrier()  # ranks leave together, as `mua train`'s do
    finally:
        destroy()


if __name__ == "__main__":
    from mua.train.loop import exit_now

    main(sys.argv[1], sys.argv[2])
    exit_now(0)  # no interpreter finalisation after the group is gone (see mua.train.loop)
