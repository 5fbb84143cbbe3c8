"""A verifiers environment as a gym: its dataset, its multi-turn protocol, its rewards.

verifiers 0.4.0 (which pins openai 2.x and its own runtime packages) runs in a side venv with
the environment package, one bridge process per rank (`gyms.verifiers.bridge`); mua keeps its
own token recording, masks and turn credit. Tasks are the environment's taskset rows
(`mua prep --gym verifiers --option env=ID --option python=...`). See docs/gyms.md,
"verifiers environments".
"""

from __future__ import annotations

import asyncio

from gyms.common.spec import package_gym
from gyms.verifiers.config import read_options
from gyms.verifiers.env import POOL, VerifiersEnv, VerifiersFault, ask
from mua.errors import UsageError
from mua.gym import Task


def build_tasks(source: str | None = None, seed: int = 0, options: dict | None = None):
    """{split: tasks} of the environment's taskset rows; the last `test_rows` are the test split."""
    if source is not None:
        raise UsageError("the verifiers gym reads its tasks from the environment; drop --source")
    opts = read_options(dict(options or {}))
    try:
        rows = asyncio.run(ask(opts, op="tasks"))["rows"]
    except VerifiersFault as e:
        raise UsageError(f"mua prep --gym verifiers: {e}") from None
    finally:
        POOL.close()
    if opts.test_rows >= len(rows):
        raise UsageError(f"test_rows={opts.test_rows} leaves no train rows of {len(rows)}")
    cut = len(rows) - opts.test_rows
    out: dict[str, list[Task]] = {}
    for i, row in enumerate(rows):
        split = "train" if i < cut else "test"
        payload = {"env": opts.env, "data": row["data"]}
        task_id = f"{opts.env}-{row['id']}"
        out.setdefault(split, []).append(
            Task(task_id, "verifiers", split, row["prompt"], payload, opts.env)
        )
    return out


GYM = package_gym(
    __name__,
    __doc__,
    VerifiersEnv,
    build_tasks,
    None,
    None,
    needs_data=True,
    budgets={"max_turns": 8, "max_total_tokens": 4096},
)
