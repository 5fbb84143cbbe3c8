"""Read a LIMO-style JSONL file of math problems, checked.

One JSON object per line with `question` (non-empty string), `answer` (string or number) and
optional `solution` (string); a bad line is a `UsageError` naming the file, the line number and
the problem. Deliberately not here: splits, prompts and task rows (gyms/math builds those).
Use as a module only (`data_prep.math`), never as a script path: its name shadows the standard
`math` module on sys.path.
"""

from __future__ import annotations

import json
from pathlib import Path

from mua.errors import UsageError


def read_jsonl(path: Path) -> list[dict]:
    """Checked rows `{"question", "answer", "solution"}` of a LIMO-style JSONL file."""
    rows = []
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"{path}: cannot read as UTF-8 text ({e})") from None
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise UsageError(
                f"{where}: not valid JSON ({e.msg}); each line must be one object"
            ) from None
        if not isinstance(row, dict):
            raise UsageError(
                f"{where}: expected a JSON object with question/answer, got {type(row).__name__}"
            )
        question, answer, solution = row.get("question"), row.get("answer"), row.get("solution", "")
        if not isinstance(question, str) or not question.strip():
            raise UsageError(f"{where}: 'question' must be a non-empty string")
        if (
            isinstance(answer, bool)
            or not isinstance(answer, (str, int, float))
            or not str(answer).strip()
        ):
            raise UsageError(f"{where}: 'answer' must be a non-empty string or number")
        if solution is not None and not isinstance(solution, str):
            raise UsageError(f"{where}: 'solution' must be a string when present")
        rows.append(
            {
                "question": question.strip(),
                "answer": str(answer).strip(),
                "solution": solution or "",
            }
        )
    if not rows:
        raise UsageError(f"{path}: no rows; expected JSON lines with question/answer keys")
    return rows
