"""The trainer's HF export gathers to rank 0 only: over 2 gloo ranks (FSDP2-sharded policy, full
weights and LoRA alike) rank 0 holds every tensor, equal to the unsharded model's, and rank 1 ends
holding none (each gather is transient there)."""

from __future__ import annotations

import os

import pytest
import torch
import torch.multiprocessing as mp

from tests.conftest import free_port

pytestmark = pytest.mark.integration

MODEL = "tiny:qwen2-1m"


def _model(lora: bool):
    from mua.config.model import LoraConfig
    from mua.models import load_model
    from mua.models.lora import add_adapters

    torch.manual_seed(0)
    model = load_model(MODEL, dtype="float32", seed=0)
    if lora:
        model = add_adapters(model, LoraConfig(rank=4))
        for name, p in model.named_parameters():
            if ".lora_B." in name:
                torch.nn.init.normal_(p, std=0.05, generator=torch.Generator().manual_seed(3))
    return model


def _worker(rank: int, world: int, port: int, out: str, lora: bool) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank))
    os.environ.update(WORLD_SIZE=str(world), LOCAL_RANK=str(rank))
    torch.set_num_threads(1)
    from mua.distributed import barrier, destroy, init_distributed
    from mua.distributed.fsdp import shard_model
    from mua.train.trained_model import gather_to_main

    info = init_distributed()
    model = shard_model(_model(lora), info.mesh)
    assert any(hasattr(p, "full_tensor") for p in model.parameters())  # really sharded
    full = gather_to_main(model, info.is_main)
    torch.save({k: v.clone() for k, v in full.items()}, f"{out}.rank{rank}")
    barrier()
    destroy()


@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
def test_export_gather_keeps_the_full_model_on_rank_0_only(tmp_path, lora):
    from mua.models.lora import lora_scalings, merged_params

    out = str(tmp_path / "gathered")
    mp.spawn(_worker, args=(2, free_port(), out, lora), nprocs=2, join=True)
    main, other = torch.load(f"{out}.rank0"), torch.load(f"{out}.rank1")
    assert other == {}
    plain = _model(lora)
    named = [(n, p.detach()) for n, p in plain.named_parameters()]
    want = dict(merged_params(named, lora_scalings(plain))) if lora else dict(named)
    assert set(main) == set(want)
    assert not any(".lora_" in n or "base_layer" in n for n in main)
    for name, tensor in want.items():
        torch.testing.assert_close(main[name], tensor, rtol=0, atol=1e-6, msg=name)
