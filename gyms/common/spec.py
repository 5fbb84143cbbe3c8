"""Assembling a gym's `GymSpec` from the parts that are its own.

`package_gym` builds the spec of a gym package: its name is the package's name and its
description the first line of the package's docstring (passed as `__doc__`, so the summary is
written once); the parts every gym has (env factory, task builder, expert, random action) come
in that order, the rest as `GymSpec` keywords.

`interact_gym` builds, through it, the spec of a gym played through `interact_with_env` (an
`InteractEnv` subclass): the gym's name and reward weights are the env class's `gym_name` and
`default_weights`, the env class itself makes the env, the expert comes from a
`next_move(turn, task)` function (`turn_expert`), and the budgets are this family's defaults
(`INTERACT_BUDGETS`) with the gym's own overrides. Nothing here knows a particular gym.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gyms.common.episode import count_assistant_turns
from gyms.common.interact import InteractEnv
from mua.errors import UsageError
from mua.gym import GymContext, GymSpec, Task

# What a UserRL-style episode needs unless its gym says otherwise.
INTERACT_BUDGETS = {"max_turns": 12, "max_total_tokens": 4096, "max_new_tokens_per_turn": 256}

NextMove = Callable[[int, Task], dict]


def as_bracket_text(message: dict) -> dict:
    """The same move written as bracket text (`[choice] content`) instead of a tool call."""
    calls = message.get("tool_calls") or []
    if not calls:
        return message
    args = calls[0]["function"]["arguments"]
    text = f"[{args['choice']}] {args.get('content', '')}".rstrip()
    return {"role": "assistant", "content": text}


def expert_text(options: dict) -> bool:
    """The `expert_text` gym option: the expert writes bracket text, not tool calls (default no)."""
    value = options.get("expert_text", False)
    if not isinstance(value, bool):
        raise UsageError(f"gym.options.expert_text must be true or false, got {value!r}")
    return value


def turn_expert(next_move: NextMove):
    """An expert factory whose reply depends only on the task and the turns already taken.

    `next_move(turn, task)` returns the assistant message for turn `turn` (0 for the first).
    With `gym.options.expert_text: true` the move is written as bracket text, the short form a
    tiny model imitates more easily than a JSON tool call (read with `tool_parser: auto`).
    """

    def make(ctx: GymContext):
        as_text = expert_text(dict(getattr(ctx, "options", None) or {}))

        async def policy(messages: list[dict], task: Task) -> dict:
            move = next_move(count_assistant_turns(messages), task)
            return as_bracket_text(move) if as_text else move

        return policy

    return make


def package_gym(
    package: str,
    doc: str | None,
    make_env: Callable,
    build_tasks: Callable[..., dict[str, list[Task]]],
    expert: Callable | None,
    random_action: Callable | None,
    **fields: Any,
) -> GymSpec:
    """The `GymSpec` of the gym package `package` (its `__name__`; a dotted path's last part is
    the gym's name) whose docstring is `doc`: its first line is the gym's description (empty
    when docstrings are stripped, as under `python -OO`). `fields`: the other `GymSpec` fields.
    """
    return GymSpec(
        name=package.rsplit(".", 1)[-1],
        description=(doc or "").strip().split("\n", 1)[0],
        make_env=make_env,
        build_tasks=build_tasks,
        expert=expert,
        random_action=random_action,
        **fields,
    )


def interact_gym(
    doc: str | None,
    env: type[InteractEnv],
    build_tasks: Callable[..., dict[str, list[Task]]],
    next_move: NextMove,
    random_action: Callable,
    **budgets: int,
) -> GymSpec:
    """The `GymSpec` of an `interact_with_env` gym; `budgets` override `INTERACT_BUDGETS`.

    `doc` is the gym package's docstring: its first line is the gym's description.
    """
    unknown = set(budgets) - set(INTERACT_BUDGETS)
    if unknown:
        raise TypeError(f"interact_gym: unknown budget(s) {sorted(unknown)}")
    return package_gym(
        env.gym_name,
        doc,
        env,
        build_tasks,
        turn_expert(next_move),
        random_action,
        reward_components=dict(env.default_weights),
        budgets={**INTERACT_BUDGETS, **budgets},
    )
