"""`results.jsonl` of an evaluation: appended row by row, read back on resume (docs/eval.md).

Every finished trajectory is appended and flushed at once. On start a torn last line and
duplicate keys are dropped (any other unreadable line is refused), rows never scored (`excluded`)
are dropped to run again, and settings differing from `eval_config.json` are refused in one line
unless `fresh`; `check_tasks` refuses rows whose task changed (`task_sha`). Credentials are
redacted from rows and masked in `eval_config.json`.
Not here: what a row contains (`mua.eval.summary`), computing fingerprints, running anything.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from mua.errors import UsageError
from mua.eval.summary import row_key
from mua.redact import redact_secrets, redact_urls

RESULTS_FILE = "results.jsonl"
CONFIG_FILE = "eval_config.json"
# settings mapped by gym (or gym entry label): compared for the gyms both evaluations name
PER_GYM_KEYS = ("gym_options", "reward_weights", "gyms")


class ResultStore:
    def __init__(
        self,
        out_dir: str | Path,
        fingerprint: dict,
        fresh: bool = False,
        task_digests: dict[tuple[str, str], str] | None = None,
    ):
        self.out_dir = Path(out_dir)
        self.path = self.out_dir / RESULTS_FILE
        # as written to eval_config.json (credentials masked), so a resume compares like with like
        self.fingerprint = redact_secrets(
            json.loads(json.dumps(fingerprint, sort_keys=True, default=str))
        )
        self.rows: dict[tuple, dict] = {}
        self.dropped_lines = 0
        self.retried = 0  # earlier rows never scored (a user or judge failure): evaluated again
        self._file = None
        self._open(fresh, task_digests or {})

    def _open(self, fresh: bool, task_digests: dict) -> None:
        self.out_dir.mkdir(parents=True, exist_ok=True)
        config_path = self.out_dir / CONFIG_FILE
        if fresh:
            self.path.unlink(missing_ok=True)
        had_results = self.path.exists() and self.path.stat().st_size > 0
        self._load_existing()
        previous = _read_config(config_path) if had_results else None
        if had_results:
            self._check_settings(previous)
        self.check_tasks(task_digests)
        self._rewrite_clean()
        record = _merged(previous, self.fingerprint) if previous else self.fingerprint
        config_path.write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
        self._file = open(self.path, "a", encoding="utf-8")

    def _check_settings(self, previous: dict | None) -> None:
        """Refuse to resume a folder whose results were made with other settings (one line)."""
        if previous is None:
            changed = [f"{CONFIG_FILE} missing"]
        else:
            labels = {key[0] for key in self.rows}
            changed = settings_changes(previous, self.fingerprint, labels)
        if changed:
            raise UsageError(
                f"{self.out_dir} holds results of a different evaluation (changed: "
                f"{', '.join(changed)}); use --fresh to start over or --out DIR for a new folder"
            )

    def _load_existing(self) -> None:
        """Read earlier rows; only a torn last line (a kill during a write) may be dropped."""
        if not self.path.exists():
            return
        lines = self.path.read_text(encoding="utf-8", errors="replace").splitlines()
        for number, line in enumerate(lines, 1):
            try:
                row = json.loads(line)
                key = row_key(row)
            except (ValueError, KeyError, TypeError):
                if not line.strip():
                    continue
                if number < len(lines):
                    raise UsageError(
                        f"{self.path}: line {number} is not a result row written by mua eval; "
                        "move the file away or use --fresh to start over"
                    ) from None
                self.dropped_lines += 1
                continue
            if row.get("excluded"):
                self.retried += 1
                continue
            self.rows.setdefault(key, row)

    def _rewrite_clean(self) -> None:
        if not self.path.exists():
            return
        tmp = self.path.with_name(f".{self.path.name}.tmp{os.getpid()}")
        with open(tmp, "w", encoding="utf-8") as f:
            for row in self.rows.values():
                f.write(json.dumps(row, ensure_ascii=False) + "\n")
        os.replace(tmp, self.path)

    def check_tasks(self, digests: dict[tuple[str, str], str]) -> None:
        """Refuse earlier rows of these (gym, task_id)s whose task content was different."""
        stale = [
            key
            for key, row in self.rows.items()
            if key[:2] in digests and row.get("task_sha") != digests[key[:2]]
        ]
        if stale:
            tasks = sorted({key[:2] for key in stale})
            raise UsageError(
                f"{self.out_dir}: {len(stale)} earlier results are of {len(tasks)} task(s) that changed "
                f"since (e.g. {tasks[0][0]}/{tasks[0][1]}: the task files were re-prepared); "
                "use --fresh to start over or --out DIR for a new folder"
            )

    def has(self, key: tuple) -> bool:
        return key in self.rows

    def rows_of(self, gym: str) -> list[dict]:
        return [r for k, r in self.rows.items() if k[0] == gym]

    def append(self, row: dict) -> None:
        key = row_key(row)
        if key in self.rows:
            return
        row = redact_urls(row)
        self.rows[key] = row
        self._file.write(json.dumps(row, ensure_ascii=False) + "\n")
        self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def settings_changes(before: dict, after: dict, labels: set[str]) -> list[str]:
    """The settings that differ, sorted: top-level keys, and within a `PER_GYM_KEYS` map each
    gym both name (`gyms.guess.max_turns`), or a gym whose results exist but whose settings
    `before` does not record (`gyms.guess`). A gym new to the folder may join."""
    changed = [
        k
        for k in set(before) | set(after)
        if k not in PER_GYM_KEYS and before.get(k) != after.get(k)
    ]
    for key in PER_GYM_KEYS:
        old, new = before.get(key) or {}, after.get(key) or {}
        for gym, settings in new.items():
            if gym not in old:
                changed += [f"{key}.{gym}"] if gym in labels else []
            elif old[gym] != settings:
                changed += _differing(f"{key}.{gym}", old[gym], settings)
    return sorted(changed)


def _differing(name: str, old, new) -> list[str]:
    """`name.<key>` for each key of two mappings that differs (`name` when not mappings)."""
    if not (isinstance(old, dict) and isinstance(new, dict)):
        return [name]
    return [f"{name}.{k}" for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k)]


def _merged(previous: dict, fingerprint: dict) -> dict:
    """What eval_config.json keeps: this evaluation's settings, and the per-gym settings of the
    gyms evaluated earlier in the folder (their results stay, so must their settings)."""
    return {
        **fingerprint,
        **{
            key: {**(previous.get(key) or {}), **(fingerprint.get(key) or {})}
            for key in PER_GYM_KEYS
            if key in fingerprint
        },
    }


def _read_config(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None
