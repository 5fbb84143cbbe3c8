"""Math tasks as canonical rows: the built-in generated set, or a LIMO-style JSONL file.

Built-in (`source=None`): `num_train`/`num_test` problems from `gyms.math.problems`, each drawn
from its own seeded stream (`"<seed>:<split>:<index>"`), so rows are reproducible.
JSONL (`source=PATH`): one JSON object per line with `question` (non-empty string), `answer`
(string or number) and optional `solution` (string); a bad line is a `UsageError` naming the file,
the line number and the problem. A file becomes `train` and `test` splits by a seeded shuffle
(`test_fraction`, default 0.1); a folder's `<split>.jsonl` files are taken as they are.
Use as a module only (`python -m data_prep.math`), never as a script path: its name shadows the
standard `math` module on sys.path.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from gyms.math.problems import make_problem
from mua.errors import UsageError
from mua.gym.api import Task
from mua.gym.prep import check_options

BUILTIN_DEFAULTS = {"num_train": 1000, "num_test": 200}
JSONL_DEFAULTS = {"test_fraction": 0.1}
VERSION = "1"
SYSTEM_PROMPT = (
    "Solve the math problem. Reason step by step, then give the final answer as \\boxed{ANSWER}."
)


def _task(split: str, index: int, question: str, payload: dict, source: str) -> Task:
    prompt = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": question}]
    return Task(
        task_id=f"math-{split}-{index:05d}",
        gym="math",
        split=split,
        prompt=prompt,
        payload=payload,
        source=source,
        version=VERSION,
    )


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


def _from_jsonl(source: Path, seed: int, options: dict) -> dict[str, list[Task]]:
    opts = check_options(options, JSONL_DEFAULTS, "math")
    if not 0.0 <= opts["test_fraction"] < 1.0:
        raise UsageError(
            f"math option test_fraction must be in [0, 1), got {opts['test_fraction']}"
        )
    if source.is_dir():
        files = sorted(source.glob("*.jsonl"))
        if not files:
            raise UsageError(f"{source}: no *.jsonl files in this folder")
        named = {f.stem: read_jsonl(f) for f in files}
    else:
        rows = read_jsonl(source)
        order = list(range(len(rows)))
        random.Random(f"{seed}:split").shuffle(order)
        num_test = int(round(len(rows) * opts["test_fraction"]))
        test_ids = set(order[:num_test])
        named = {
            "train": [r for i, r in enumerate(rows) if i not in test_ids],
            "test": [r for i, r in enumerate(rows) if i in test_ids],
        }
    out = {}
    for split, rows in named.items():
        out[split] = [
            _task(split, i, r["question"], {**r, "kind": "jsonl"}, f"jsonl:{source.name}")
            for i, r in enumerate(rows)
        ]
    return {k: v for k, v in out.items() if v}


def build_tasks(
    source: str | None, seed: int, options: dict | None = None
) -> dict[str, list[Task]]:
    if source is not None:
        return _from_jsonl(Path(source), seed, options or {})
    opts = check_options(options or {}, BUILTIN_DEFAULTS, "math")
    splits = {}
    for split in ("train", "test"):
        tasks = []
        for i in range(opts[f"num_{split}"]):
            problem = make_problem(random.Random(f"{seed}:{split}:{i}"))
            tasks.append(_task(split, i, problem["question"], problem, f"builtin:seed={seed}"))
        splits[split] = tasks
    return splits
