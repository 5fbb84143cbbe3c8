"""Shared benchmark helpers: interleaved timing (A B A B ..., median after warm-up), result files,
a measurement in a worker process of its own (`worker_result`), a model built from a config as
the trainer runs it on CPU (`cpu_trainer_model`), and the checks that a benchmark timed the work
it names (`require_work`, `require_same_work`: a timing of nothing fails instead of passing).

Does not decide what is measured; each bench module does.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


def interleaved_rounds(
    fns: dict[str, Callable[[], object]], repeats: int = 5, warmup: int = 1
) -> dict[str, list[float]]:
    """Seconds of each callable in each round, measured A B A B ... after `warmup` rounds: a
    ratio of two callables taken round by round compares runs made seconds apart."""
    times: dict[str, list[float]] = {k: [] for k in fns}
    for i in range(warmup + repeats):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            dt = time.perf_counter() - t0
            if i >= warmup:
                times[name].append(dt)
    return times


def interleaved(
    fns: dict[str, Callable[[], object]], repeats: int = 5, warmup: int = 1
) -> dict[str, float]:
    """Median seconds of each callable, measured A B A B ... after `warmup` rounds."""
    rounds = interleaved_rounds(fns, repeats, warmup)
    return {k: statistics.median(v) for k, v in rounds.items()}


class NoWorkTimed(RuntimeError):
    """A benchmark timed less work than it names (nothing generated, trained or pushed, or not
    the same work on both sides): its figures would mean nothing, so it fails."""


def require_work(bench_id: str, what: str, **counts: float) -> None:
    """Fail unless every count of the work timed is above 0, e.g.
    `require_work("B1", "mua step 3", trajectories=32, trained_tokens=610)`."""
    empty = [f"{name}={value:g}" for name, value in counts.items() if not value > 0]
    if empty:
        raise NoWorkTimed(f"{bench_id}: {what} timed no work ({', '.join(empty)})")


def require_same_work(bench_id: str, what: str, **sides: float) -> None:
    """Fail unless both (all) sides of a comparison did the same amount of work, e.g.
    `require_same_work("B1", "trajectories per step", mua=32, trl=32)`."""
    if len(set(sides.values())) > 1:
        shown = ", ".join(f"{name} {value:g}" for name, value in sides.items())
        raise NoWorkTimed(f"{bench_id}: the sides did different work ({what}: {shown})")


def nonzero_grads(model) -> int:
    """Gradient entries that are not 0 after a backward (0: the update trained nothing)."""
    return sum(int(p.grad.count_nonzero()) for p in model.parameters() if p.grad is not None)


def _check(value: float, rule: str) -> bool:
    m = re.fullmatch(r"\s*(<=|>=|<|>)\s*([-+0-9.eE]+)\s*", rule)
    if not m:
        raise ValueError(f"bad bar rule {rule!r}")
    op, bound = m.group(1), float(m.group(2))
    return {"<=": value <= bound, ">=": value >= bound, "<": value < bound, ">": value > bound}[op]


def write_result(
    bench_id: str, metrics: dict[str, float], bar: dict[str, str], notes: str = ""
) -> dict:
    ok = all(name in metrics and _check(metrics[name], rule) for name, rule in bar.items())
    doc = {
        "id": bench_id,
        "metrics": metrics,
        "bar": bar,
        "ok": ok,
        "machine": f"{platform.machine()} {platform.processor() or ''} {platform.system()} cores={cpu_cores()}".strip(),
        "when": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    }
    if notes:
        doc["notes"] = notes
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{bench_id}.json").write_text(json.dumps(doc, indent=2))
    return doc


def load_1min() -> float:
    """The machine's 1-minute load average (nan where the platform has none)."""
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")


def cpu_cores() -> int:
    import os

    return (
        len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    )


REPO_ROOT = Path(__file__).resolve().parent.parent


def worker_results(bench_id: str, module: str, *modes: str, timeout_s: float) -> list[dict]:
    """`worker_result` of each mode in turn, each printed as `  <mode>: <result>` once all ran."""
    results = [worker_result(bench_id, module, mode, timeout_s) for mode in modes]
    print("\n".join(f"  {m}: {r}" for m, r in zip(modes, results, strict=True)), flush=True)
    return results


def worker_result(bench_id: str, module: str, mode: str, timeout_s: float) -> dict:
    """Run `python -m <module> <mode>` in a process of its own (2 threads; its peak memory is its
    own) and return the JSON object its last stdout line prints; RuntimeError with the end of its
    stderr when it fails."""
    env = {**os.environ, "OMP_NUM_THREADS": "2", "PYTHONPATH": str(REPO_ROOT)}
    out = subprocess.run(
        [sys.executable, "-m", module, mode],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )
    if out.returncode != 0:
        raise RuntimeError(f"{bench_id} {mode} worker failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def cpu_trainer_model(config, seed: int):
    """A model of random weights (seeded) from a transformers `config`, fp32, as the trainer runs
    it on CPU: varlen attention and the trainer's norms."""
    import torch
    from transformers import AutoModelForCausalLM

    from mua.kernels.packed_attention import enable_varlen
    from mua.train.trained_model import use_trainer_norms

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(
        config, dtype=torch.float32, attn_implementation="sdpa"
    )
    enable_varlen(model)
    use_trainer_norms(model, "cpu")
    return model
