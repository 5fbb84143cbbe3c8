"""Shared benchmark helpers: interleaved timing (A B A B ..., median after warm-up) and result files.

Does not decide what is measured; each bench module does.
"""

from __future__ import annotations

import datetime as _dt
import json
import platform
import re
import statistics
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


def cpu_cores() -> int:
    import os

    return (
        len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    )
