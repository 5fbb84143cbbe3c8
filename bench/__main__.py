"""Run benchmarks: `python -m bench [B1 B2 ...]` (all when none given); prints a table."""

from __future__ import annotations

import importlib
import pkgutil
import re
import sys
import traceback
from pathlib import Path

from bench.common import write_result


def _modules() -> dict[str, object]:
    out = {}
    for info in pkgutil.iter_modules([str(Path(__file__).parent)]):
        if info.name.startswith("b") and "_" in info.name and info.name[1].isdigit():
            bench_id = info.name.split("_", 1)[0].upper()
            out[bench_id] = f"bench.{info.name}"
    # B7V (B7 for another engine) sorts after B7
    return dict(sorted(out.items(), key=lambda kv: (int(re.match(r"\d+", kv[0][1:])[0]), kv[0])))


def main(argv: list[str]) -> int:
    wanted = [a.upper() for a in argv if a.strip()]
    mods = _modules()
    unknown = [w for w in wanted if w not in mods]
    if unknown:
        print(f"unknown benchmark(s) {unknown}; available: {', '.join(mods)}", file=sys.stderr)
        return 2
    rows = []
    for bench_id, mod_name in mods.items():
        if wanted and bench_id not in wanted:
            continue
        mod = importlib.import_module(mod_name)
        print(
            f"== {bench_id}: {mod.__doc__.strip().splitlines()[0] if mod.__doc__ else ''}",
            flush=True,
        )
        try:
            result = mod.run()
        except Exception as e:  # one broken benchmark must not hide the others
            traceback.print_exc()
            rows.append((bench_id, f"error: {type(e).__name__}: {e}", "", "FAIL"))
            continue
        if result is None:
            rows.append((bench_id, "skipped", "", "-"))
            continue
        metrics, notes = (result, "") if not isinstance(result, tuple) else result
        doc = write_result(bench_id, metrics, mod.BAR, notes)
        shown = ", ".join(f"{k}={v:.4g}" for k, v in metrics.items())
        bar = ", ".join(f"{k} {v}" for k, v in mod.BAR.items())
        rows.append((bench_id, shown, bar, "ok" if doc["ok"] else "MISS"))
    print()
    for r in rows:
        print(f"{r[0]:<4} {r[3]:<5} {r[1]}  [bar: {r[2]}]")
    return 0 if all(r[3] in ("ok", "-") for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
