"""Compare two training run folders exactly: every logged metric and the final weights.

    python scripts/compare_runs.py RUN_DIR_A RUN_DIR_B

Reads each run's MLflow store (`mlflow.db`, table `metrics`) and its exported weights
(`hf/final/*.safetensors`). Metrics that measure wall-clock time are left out (`time/...`,
`tokens_per_s`, `engine/idle_frac`, and whatever `--skip PREFIX` adds); every other (key, step)
must hold the same value, bit for bit, in both runs, and each tensor of the final weights must be
equal in dtype, shape and every element. Prints one line per difference (or per missing key) and
a last line `identical` or `DIFFERENT`; exits 0 when identical, 1 otherwise.
Does not look at checkpoints, transcripts or `metrics.jsonl` (the same numbers as the store).

With the hf engine, two runs of the same code and recipe differ in
`logp_diff_engine_vs_trainer` and `..._max` only: the engine's log-probs depend on which requests
were decoded together, which depends on timing (the sampled tokens, and so everything trained,
do not). Compare such runs with `--skip logp_diff_engine_vs_trainer`.
"""

from __future__ import annotations

import argparse
import math
import sqlite3
import struct
import sys
from pathlib import Path

WALL_CLOCK = ("time/", "tokens_per_s", "engine/idle_frac")


def read_metrics(run_dir: Path, skip: tuple[str, ...]) -> dict[tuple[str, int], list[float]]:
    """(key, step) -> the values logged for it, in logging order."""
    db = run_dir / "mlflow.db"
    if not db.is_file():
        raise SystemExit(f"{run_dir}: no mlflow.db; pass a training run folder")
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        rows = con.execute(
            "SELECT key, step, value, is_nan FROM metrics ORDER BY key, step, timestamp"
        ).fetchall()
    finally:
        con.close()
    out: dict[tuple[str, int], list[float]] = {}
    for key, step, value, is_nan in rows:
        if key.startswith(skip):
            continue
        out.setdefault((key, int(step)), []).append(math.nan if is_nan else float(value))
    return out


def _bits(value: float) -> bytes:
    return struct.pack("<d", value)


def compare_metrics(a: dict, b: dict) -> list[str]:
    problems = []
    for key in sorted(set(a) | set(b)):
        if key not in a or key not in b:
            where = "first" if key not in a else "second"
            problems.append(f"metric {key[0]} step {key[1]}: missing in the {where} run")
            continue
        va, vb = a[key], b[key]
        if len(va) != len(vb) or any(_bits(x) != _bits(y) for x, y in zip(va, vb, strict=False)):
            problems.append(f"metric {key[0]} step {key[1]}: {va} != {vb}")
    return problems


def read_weights(run_dir: Path) -> dict:
    from safetensors.torch import load_file

    files = sorted((run_dir / "hf" / "final").glob("*.safetensors"))
    if not files:
        raise SystemExit(f"{run_dir}: no hf/final/*.safetensors; did the run finish?")
    tensors = {}
    for f in files:
        tensors.update(load_file(str(f)))
    return tensors


def compare_weights(a: dict, b: dict) -> list[str]:
    import torch

    problems = []
    for name in sorted(set(a) | set(b)):
        if name not in a or name not in b:
            problems.append(
                f"weight {name}: missing in the {'first' if name not in a else 'second'} run"
            )
            continue
        x, y = a[name], b[name]
        if x.dtype != y.dtype or x.shape != y.shape:
            problems.append(f"weight {name}: {x.dtype}{list(x.shape)} != {y.dtype}{list(y.shape)}")
        elif not torch.equal(x, y):
            diff = (x.float() - y.float()).abs().max().item()
            problems.append(f"weight {name}: differs (largest difference {diff:.3g})")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("first", type=Path)
    parser.add_argument("second", type=Path)
    parser.add_argument(
        "--skip", action="append", default=[], help="another metric prefix to leave out"
    )
    args = parser.parse_args(argv)
    skip = WALL_CLOCK + tuple(args.skip)
    ma, mb = read_metrics(args.first, skip), read_metrics(args.second, skip)
    problems = compare_metrics(ma, mb) + compare_weights(
        read_weights(args.first), read_weights(args.second)
    )
    for line in problems:
        print(line)
    keys = len({k for k, _ in ma})
    print(
        f"{keys} metrics over {len(ma)} (key, step) pairs and the final weights: "
        + ("identical" if not problems else f"DIFFERENT ({len(problems)} differences)")
    )
    return 0 if not problems else 1


if __name__ == "__main__":
    sys.exit(main())
