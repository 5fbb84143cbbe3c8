"""Math tasks as canonical rows: the built-in generated set, or a LIMO-style JSONL file.

Built-in (`source=None`): `num_train`/`num_test` problems from `gyms.math.problems`, each drawn
from its own seeded stream (`"<seed>:<split>:<index>"`), so rows are reproducible.
JSONL (`source=PATH`): rows read and checked by `data_prep.math.read_jsonl`. A file becomes
`train` and `test` splits by a seeded shuffle (`test_fraction`, default 0.1); a folder's
`<split>.jsonl` files are taken as they are.
"""

from __future__ import annotations

import random
from pathlib import Path

from data_prep.math import read_jsonl
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
