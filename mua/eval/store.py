"""`results.jsonl` of an evaluation: appended row by row, read back on resume.

Every finished trajectory is appended (and flushed) at once, so an interrupted evaluation keeps
everything it finished. On start, the existing file is read, a torn last line (a kill during a
write) and duplicate keys are dropped, and the clean rows are written back atomically; the keys
(gym, task_id, sample_index) already present are not evaluated again. `eval_config.json` holds
the settings that determine results (model, sampling, budgets, user); resuming into a folder
evaluated with other settings is refused unless `fresh`, which starts over.
Not here: what a row contains (`mua.eval.metrics`) or running anything.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from mua.errors import UsageError
from mua.eval.metrics import row_key

RESULTS_FILE = "results.jsonl"
CONFIG_FILE = "eval_config.json"


class ResultStore:
    def __init__(self, out_dir: str | Path, fingerprint: dict, fresh: bool = False):
        self.out_dir = Path(out_dir)
        self.path = self.out_dir / RESULTS_FILE
        self.fingerprint = json.loads(json.dumps(fingerprint, sort_keys=True, default=str))
        self.rows: dict[tuple, dict] = {}
        self.dropped_lines = 0
        self._file = None
        self._open(fresh)

    def _open(self, fresh: bool) -> None:
        self.out_dir.mkdir(parents=True, exist_ok=True)
        config_path = self.out_dir / CONFIG_FILE
        if fresh:
            self.path.unlink(missing_ok=True)
        elif self.path.exists() and config_path.exists():
            previous = json.loads(config_path.read_text())
            if previous != self.fingerprint:
                changed = sorted(
                    k
                    for k in set(previous) | set(self.fingerprint)
                    if previous.get(k) != self.fingerprint.get(k)
                )
                raise UsageError(
                    f"{self.out_dir} holds results of a different evaluation (changed: {', '.join(changed)}); "
                    "use --fresh to start over or --out DIR for a new folder"
                )
        self._load_existing()
        config_path.write_text(json.dumps(self.fingerprint, indent=2, sort_keys=True) + "\n")
        self._file = open(self.path, "a", encoding="utf-8")

    def _load_existing(self) -> None:
        if not self.path.exists():
            return
        for line in self.path.read_text(encoding="utf-8").splitlines():
            try:
                row = json.loads(line)
                key = row_key(row)
            except (ValueError, KeyError, TypeError):
                self.dropped_lines += bool(line.strip())
                continue
            self.rows.setdefault(key, row)
        tmp = self.path.with_name(f".{self.path.name}.tmp{os.getpid()}")
        with open(tmp, "w", encoding="utf-8") as f:
            for row in self.rows.values():
                f.write(json.dumps(row, ensure_ascii=False) + "\n")
        os.replace(tmp, self.path)

    def has(self, key: tuple) -> bool:
        return key in self.rows

    def rows_of(self, gym: str) -> list[dict]:
        return [r for k, r in self.rows.items() if k[0] == gym]

    def append(self, row: dict) -> None:
        key = row_key(row)
        if key in self.rows:
            return
        self.rows[key] = row
        self._file.write(json.dumps(row, ensure_ascii=False) + "\n")
        self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
