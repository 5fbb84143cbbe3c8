"""One GRPO step of tiny:qwen3moe-310m (309M parameters, 16 experts per layer, 2 per token) on two
CPU ranks: each rank's peak resident memory against the estimate.

    python scripts/moe_memory.py [--out runs/moe_memory]

The ranks' peak is their processes' VmHWM (Linux), read every half second while `mua train
--nproc-per-node 2` runs; the estimate is `mua.train.memory_estimate.cpu_rank_bytes` of the
same recipe (the pre-flight's rows for a CPU rank). The bar (docs/moe.md): every rank within
20 % of the estimate. Prints both, writes OUT/memory.json, exits 0 when the bar holds. Needs
about 10 GB of free memory; uses the guess tasks `mua prep` writes into OUT/data.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
MODEL = "tiny:qwen3moe-310m"
MICRO_BATCH_TOKENS = 512


def recipe(out: Path) -> dict:
    return {
        "model": {"path": MODEL, "tool_parser": "bracket"},
        "gym": {"name": "guess"},
        "data": {"train_files": [str(out / "data" / "train.parquet")], "tasks_per_step": 2},
        "rollout": {"n": 2, "max_new_tokens_per_turn": 8, "max_total_tokens": 128, "max_turns": 2},
        "algo": {"kind": "grpo"},
        "parallel": {"micro_batch_tokens": MICRO_BATCH_TOKENS},
        "checkpoint": {"save_freq": 0, "export_hf_at_end": False},
        "total_steps": 1,
        "run_dir": str(out / "run"),
    }


def estimate(rec: dict) -> int:
    from mua.models.model_loading import meta_model
    from mua.train.memory_estimate import (
        GIB,
        ModelShape,
        RunShape,
        cpu_rank_bytes,
        estimate_memory,
        moe_sizes,
    )  # fmt: skip

    model = meta_model(MODEL)
    sizes = moe_sizes(model)
    shape = ModelShape.from_hf_config(model.config, num_params=sizes.total, moe=sizes)
    run = RunShape(
        world_size=2, micro_batch_tokens=MICRO_BATCH_TOKENS, train_dtype="float32", engine="hf",
        engine_memory="copy", engine_dtype="float32",
        max_total_tokens=rec["rollout"]["max_total_tokens"],
    )  # fmt: skip
    return cpu_rank_bytes(estimate_memory(shape, run, 80 * GIB), run)


def _children(pid: int) -> list[int]:
    try:
        return [int(x) for x in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def rank_peaks(cmd: list[str], log: Path) -> dict[int, int]:
    """Run `cmd`; the peak resident bytes of each of its `mua.train.loop` processes."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    with open(log, "w") as f:
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=f, stderr=subprocess.STDOUT)
    peaks: dict[int, int] = {}
    while proc.poll() is None:
        stack = [proc.pid]
        while stack:
            pid = stack.pop()
            stack += _children(pid)
            try:
                status = Path(f"/proc/{pid}/status").read_text()
                command = Path(f"/proc/{pid}/cmdline").read_text()
            except OSError:
                continue
            if "mua.train.loop" not in command or "torchrun" in command:
                continue
            hwm = next(line for line in status.splitlines() if line.startswith("VmHWM"))
            peaks[pid] = max(peaks.get(pid, 0), int(hwm.split()[1]) * 1024)
        time.sleep(0.5)
    if proc.returncode != 0:
        raise SystemExit(f"mua train failed (exit {proc.returncode}); see {log}")
    return peaks


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="runs/moe_memory")
    out = (REPO / ap.parse_args().out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    mua = [sys.executable, "-m", "mua.cli.main"]
    if not (out / "data" / "train.parquet").is_file():
        subprocess.run([*mua, "prep", "--gym", "guess", "--out", str(out / "data")], cwd=REPO,
                       check=True, capture_output=True)  # fmt: skip
    rec = recipe(out)
    (out / "recipe.yaml").write_text(yaml.safe_dump(rec))
    expected = estimate(rec)
    peaks = rank_peaks([*mua, "train", str(out / "recipe.yaml"), "--nproc-per-node", "2"],
                       out / "train.log")  # fmt: skip
    ratios = [p / expected for p in peaks.values()]
    holds = len(ratios) == 2 and all(0.8 <= r <= 1.2 for r in ratios)
    result = {"estimate_gib": expected / 2**30, "rank_peaks_gib": [p / 2**30 for p in peaks.values()],
              "ratios": ratios, "holds": holds}  # fmt: skip
    (out / "memory.json").write_text(json.dumps(result, indent=2))
    print(json.dumps(result))
    return 0 if holds else 1


if __name__ == "__main__":
    raise SystemExit(main())
