"""The co-located SGLang path on real GPUs, run under torchrun by tests/gpu/test_sglang_gpu.py.

Usage: torchrun --nproc_per_node N tests/gpu/sglang_smoke.py OUT.json MODEL_FOLDER

Every rank holds the FSDP2-sharded trainer model; rank 0 launches SGLang through mua's launcher
(with tp 1, then tp 2 when N >= 2) and leads it, the others connect to the URL it shares. For each
server, in order: the first wake on the fresh server (must resume nothing), a tensor push through
the trainer's real gather path and the probe on every rank at once (one shared server, unique
rids), a second sleep/wake cycle, the same seeded generate twice, and the disk path as a control.
Rank 0 writes what it saw (with the sglang version) to OUT.json; any failure raises.
"""

from __future__ import annotations

import asyncio
import json
import socket
import sys
from pathlib import Path

import torch


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def _cycle(sync, run: dict) -> None:
    """wake (resume what was released, push, probe on every rank at once) and sleep."""
    await sync.begin()
    run.setdefault("probe_diffs", []).append(sync.take_metrics()["engine/probe_logp_diff"])
    await sync.end()


async def _twice(engine, request):
    await engine.wake()
    a = await engine.generate(request)
    b = await engine.generate(request)
    return a.token_ids, b.token_ids, engine.seeds_honoured


def main() -> None:
    from mua.distributed import all_gather_objects, barrier
    from mua.distributed.fsdp import shard_model
    from mua.distributed.runtime import init_distributed
    from mua.engines import weight_probe
    from mua.engines.engine_contract import GenerationRequest, SamplingParams
    from mua.engines.sglang.colocated import SGLangColocated
    from mua.engines.sglang.sglang_engine import SGLangEngine, sglang_version
    from mua.engines.sglang.sglang_launch import launch_sglang_server
    from mua.models import load_model
    from mua.train.engine_sync import EngineSync

    out_file, folder = Path(sys.argv[1]), sys.argv[2]
    info = init_distributed()
    report: dict = {"sglang_version": sglang_version(), "world_size": info.world_size, "runs": []}
    model = load_model(folder, dtype="float32", seed=0)
    gen = torch.Generator().manual_seed(1)  # the same perturbation on every rank
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=gen) * 0.05)
    model = shard_model(model, info.mesh, mixed_precision="fp32")
    probe_ids = weight_probe.default_probe_ids(model.config.vocab_size)
    for tp in [1, 2] if info.world_size >= 2 else [1]:
        port = all_gather_objects(_free_port())[0]
        if info.rank == 0:
            engine = launch_sglang_server(
                folder,
                port=port,
                tp_size=tp,
                mem_fraction=0.25,
                dtype="float32",
                extra_args=["--attention-backend", "triton", "--disable-cuda-graph"],
                log_path=str(out_file.with_suffix(f".tp{tp}.log")),
                launch_timeout_s=600,
                bucket_mb=1.0,
            )
        barrier()  # the server answers /health before any follower connects
        if info.rank != 0:
            engine = SGLangEngine(f"http://127.0.0.1:{port}", bucket_mb=1.0, tp_size=tp)
        sync = EngineSync(
            SGLangColocated(engine, is_leader=info.rank == 0, probe_ids=probe_ids), model
        )
        run: dict = {"tp": tp}

        asyncio.run(_cycle(sync, run))  # fresh server: nothing resumed; push; all ranks probe
        asyncio.run(_cycle(sync, run))  # resume weights, push, resume the rest, probe
        if info.rank == 0:
            seeded = GenerationRequest(
                prompt_ids=probe_ids,
                sampling=SamplingParams(temperature=1.0, max_new_tokens=8, seed=5),
            )

            a, b, honoured = asyncio.run(_twice(engine, seeded))
            run.update(seeded_equal=a == b, seeds_honoured=honoured)
            asyncio.run(engine.sleep())
        barrier()
        engine.weight_path = "disk"  # the control: the same cycle through /update_weights_from_disk
        engine.hf_config = model.config
        sync.mark_stale()
        asyncio.run(_cycle(sync, run))
        report["runs"].append(run)
        asyncio.run(sync.close())
        barrier()
    if info.rank == 0:
        out_file.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
