"""The guess gym's built-in dataset: hidden numbers drawn with a seed, split into train and test.

Options: `max_number` (N, default 16), `num_train` (default 512), `num_test` (default 64);
`expert_noise` is accepted and left to the expert, `llm_user` and `turn_cost` to the env,
`user_noise` to the scripted user of the user seat (`mua.users`). The same seed and options give
the same tasks. There is no public dataset for this gym.
"""

from __future__ import annotations

import random

from gyms.guess.env import system_prompt
from mua.errors import UsageError
from mua.gym import Task

_KNOWN_OPTIONS = {"max_number", "num_train", "num_test"}


def _int_option(options: dict, key: str, default: int, minimum: int) -> int:
    value = options.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise UsageError(f"gym.options.{key} must be an integer >= {minimum}, got {value!r}")
    return value


def build_tasks(
    source: str | None = None, seed: int = 0, options: dict | None = None
) -> dict[str, list[Task]]:
    options = dict(options or {})
    if source is not None:
        raise UsageError(
            "the guess gym has no public dataset; drop --source to use its built-in tasks"
        )
    unknown = sorted(
        set(options)
        - _KNOWN_OPTIONS
        - {"max_turns", "expert_noise", "user_noise", "llm_user", "turn_cost"}
    )
    if unknown:
        raise UsageError(f"unknown guess option(s) {unknown}; known: {sorted(_KNOWN_OPTIONS)}")
    if not isinstance(options.get("llm_user", False), bool):
        raise UsageError(f"gym.options.llm_user must be true or false, got {options['llm_user']!r}")
    max_number = _int_option(options, "max_number", 16, 2)
    sizes = {
        "train": _int_option(options, "num_train", 512, 0),
        "test": _int_option(options, "num_test", 64, 0),
    }
    rng = random.Random(seed)
    prompt = [
        {"role": "system", "content": system_prompt(max_number)},
        {"role": "user", "content": "Your guess?"},
    ]
    out: dict[str, list[Task]] = {}
    for split, size in sizes.items():
        out[split] = [
            Task(
                task_id=f"guess-{split}-{i:04d}",
                gym="guess",
                split=split,
                prompt=[dict(m) for m in prompt],
                payload={"target": rng.randint(1, max_number), "max_number": max_number},
            )
            for i in range(size)
        ]
    return out
