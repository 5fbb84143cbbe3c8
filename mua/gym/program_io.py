"""How mua talks to a program it starts for a gym (an agent program, a reward program): its
command line, the task it is handed as JSON, and the reward it prints.

Not here: starting or watching the process (`mua.gateway.program`, the gyms that run programs).
"""

from __future__ import annotations

import json
import sys


def command_line(command: list[str]) -> list[str]:
    """The command to start; a leading `python` is the interpreter mua itself runs in."""
    return [sys.executable, *command[1:]] if command[0] == "python" else list(command)


def task_json(task) -> str:
    """The task as the program reads it (`MUA_TASK`, or stdin)."""
    return json.dumps(
        {"task_id": task.task_id, "gym": task.gym, "prompt": task.prompt, "payload": task.payload},
        ensure_ascii=False,
    )


def reward_from_stdout(stdout: str) -> float | None:
    """The reward of the last stdout line that is a JSON object with a number under `reward`."""
    for line in reversed(stdout.strip().splitlines()):
        try:
            value = json.loads(line)
        except ValueError:
            continue
        reward = value.get("reward") if isinstance(value, dict) else None
        if isinstance(reward, (int, float)) and not isinstance(reward, bool):
            return float(reward)
    return None
