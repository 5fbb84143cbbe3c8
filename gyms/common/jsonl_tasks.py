"""Tasks of a bring-your-own-environment gym (mcp, openenv) from a JSONL file.

One JSON object a line: `prompt` (a string, with an optional `system`, or a list of
`{role, content}` messages), `payload` (an object the environment, user and scorer read), and
optional `split` (train/test/validation/dev, default train) and `id`. A bad line is a
`UsageError` naming the file and line. Nothing here runs an environment.
"""

from __future__ import annotations

import json
from pathlib import Path

from mua.errors import UsageError
from mua.gym import Task

SPLITS = ("train", "test", "validation", "dev")


def _prompt(row: dict, where: str) -> list[dict]:
    prompt = row.get("prompt")
    if isinstance(prompt, str):
        prompt = [{"role": "user", "content": prompt}]
        if isinstance(row.get("system"), str):
            prompt.insert(0, {"role": "system", "content": row["system"]})
    ok = (
        isinstance(prompt, list)
        and prompt
        and all(
            isinstance(m, dict)
            and isinstance(m.get("role"), str)
            and isinstance(m.get("content"), str)
            for m in prompt
        )
    )
    if not ok:
        raise UsageError(
            f"{where}: prompt must be a string or a list of {{role, content}} messages"
        )
    return prompt


def jsonl_tasks(source: str, gym: str) -> dict[str, list[Task]]:
    """{split: tasks} of the JSONL file `source`, as tasks of `gym`."""
    if not Path(source).is_file():
        raise UsageError(f"{source}: no such tasks file (give a .jsonl of {{prompt, payload}})")
    out: dict[str, list[Task]] = {}
    for line_no, line in enumerate(Path(source).read_text().splitlines(), 1):
        if not line.strip():
            continue
        where = f"{source} line {line_no}"
        try:
            row = json.loads(line)
        except ValueError:
            raise UsageError(f"{where}: not valid JSON") from None
        if not isinstance(row, dict):
            raise UsageError(f"{where}: expected a JSON object with prompt and payload")
        payload = row.get("payload", {})
        if not isinstance(payload, dict):
            raise UsageError(
                f"{where}: payload must be a JSON object, got {type(payload).__name__}"
            )
        split = row.get("split", "train")
        if split not in SPLITS:
            raise UsageError(f"{where}: split {split!r} is not one of {', '.join(SPLITS)}")
        tasks = out.setdefault(split, [])
        task_id = str(row.get("id") or f"{gym}-{split}-{len(tasks):04d}")
        tasks.append(Task(task_id, gym, split, _prompt(row, where), payload, Path(source).name))
    if not out:
        raise UsageError(f"{source}: no tasks in the file")
    return out


def byo_build_tasks(gym: str):
    """The `build_tasks` of a gym whose tasks come from a JSONL: `source` (`mua prep --source`),
    else the gym option `tasks` (a recipe that names the file itself)."""

    def build_tasks(source: str | None = None, seed: int = 0, options: dict | None = None):
        options = dict(options or {})
        if source is None:
            source = options.get("tasks")
            if not isinstance(source, str):
                raise UsageError(
                    f"the {gym} gym has no built-in tasks; give --source tasks.jsonl (one "
                    "{prompt, payload} object a line), task files, or the gym option tasks: "
                    "tasks.jsonl"
                )
        elif options:
            raise UsageError(f"the {gym} gym takes no prep options, got {sorted(options)}")
        return jsonl_tasks(source, gym)

    return build_tasks
