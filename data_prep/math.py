"""Read a LIMO-style JSONL file of math problems, checked.

One JSON object per line with `question` (non-empty string), `answer` (string or number) and
optional `solution` (string); a bad line is a `UsageError` naming the file, the line number and
the problem. Deliberately not here: splits, prompts and task rows (gyms/math builds those).
Use as a module only (`data_prep.math`), never as a script path: its name shadows the standard
`math` module on sys.path.
"""

from __future__ import annotations

from pathlib import Path

from mua.errors import UsageError
from mua.jsonl import jsonl_objects


def read_jsonl(path: Path) -> list[dict]:
    """Checked rows `{"question", "answer", "solution"}` of a LIMO-style JSONL file."""
    rows = []
    for number, row in jsonl_objects(path, "one object with question and answer"):
        where = f"{path}:{number}"
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
