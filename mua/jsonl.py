"""Read a JSON-lines file of objects, refusing a bad line in one line that names it.

`jsonl_objects(path, expected)` yields (line number, object) for every non-blank line; a line that
is not UTF-8, not JSON or not a JSON object raises `UsageError` with the file, the line and
`expected` (what each line should hold). What the objects must contain is the caller's check.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

from mua.errors import UsageError


def jsonl_objects(path: Path, expected: str) -> Iterator[tuple[int, dict]]:
    try:
        raw_lines = path.read_bytes().splitlines()
    except OSError as e:
        raise UsageError(f"{path}: cannot read ({e})") from None
    for n, raw in enumerate(raw_lines, 1):
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise UsageError(
                f"{path}: line {n}: not valid UTF-8 (byte {e.start} of the line: "
                f"{raw[e.start : e.start + 4]!r}); re-encode the file as UTF-8"
            ) from None
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise UsageError(f"{path}: line {n}: not JSON ({e.msg}); expected {expected}") from None
        if not isinstance(row, dict):
            raise UsageError(f"{path}: line {n}: a JSON {type(row).__name__}; expected {expected}")
        yield n, row
