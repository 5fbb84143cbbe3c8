"""B4: FSDP2 memory per rank, 2 ranks vs 1: parameters + gradients + AdamW state (torchrun, gloo, CPU).

Each world size is one `torchrun --standalone` launch of `bench._fsdp_memory_worker`, which shards
tiny:qwen2-10m with the trainer's FSDP2 code (`mua.distributed.fsdp.shard_model`, fp32), takes one real
training step and counts the bytes of the tensors each rank holds (see the worker's docstring).

per_rank_bytes_ratio_2_vs_1 = max over the 2 ranks of their bytes / the single rank's bytes
(ideal 0.5; shard padding and anything replicated push it up). Counts bytes, not time; the
process-wide RSS is not compared because interpreter and library overhead do not shard.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.common import require_same_work, require_work

ID = "B4"
BAR = {"per_rank_bytes_ratio_2_vs_1": "<= 0.55"}

MODEL = "tiny:qwen2-10m"
REPO_ROOT = Path(__file__).resolve().parent.parent
TIMEOUT_S = 300
_RANK_ENV = ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")


def measure(world_size: int) -> list[int]:
    """Per-rank totals (params + grads + optimizer state), in rank order."""
    env = {k: v for k, v in os.environ.items() if k not in _RANK_ENV}
    env.update(
        OMP_NUM_THREADS="1",
        PYTHONPATH=os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")])),
    )
    with tempfile.TemporaryDirectory(prefix="mua-b4-") as tmp:
        out = Path(tmp) / "counts.json"
        cmd = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            f"--nproc-per-node={world_size}",
            "-m",
            "bench._fsdp_memory_worker",
            str(out),
            MODEL,
        ]
        proc = subprocess.run(
            cmd, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=TIMEOUT_S
        )
        if proc.returncode != 0 or not out.exists():
            raise RuntimeError(
                f"torchrun with {world_size} rank(s) failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}"
            )
        ranks = json.loads(out.read_text())["ranks"]
    require_same_work(
        ID, f"ranks reported with {world_size}", ranks=len(ranks), launched=world_size
    )
    for rank, r in enumerate(ranks):  # a real step leaves gradients and AdamW state on every rank
        require_work(
            ID,
            f"rank {rank} of {world_size}",
            param_bytes=r["param_bytes"],
            grad_bytes=r["grad_bytes"],
            optim_bytes=r["optim_bytes"],
        )
    return [r["param_bytes"] + r["grad_bytes"] + r["optim_bytes"] for r in ranks]


def run() -> dict[str, float]:
    one = measure(1)[0]
    two = measure(2)
    return {
        "per_rank_bytes_ratio_2_vs_1": max(two) / one,
        "bytes_1_rank": float(one),
        "bytes_per_rank_2_ranks_max": float(max(two)),
        "bytes_2_ranks_total": float(sum(two)),
    }
