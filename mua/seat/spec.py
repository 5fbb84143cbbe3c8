"""A `gyms:` entry with `seat: user`: the checks it must pass and the spec it runs with.

`check_seat(where, entry, spec)` refuses, in one line naming the fix, an entry whose gym has no
user that can take the seat (`GymSpec.user_seat` unset), a fixed `{kind: expert}` agent on a gym
without an expert, and keys that mean nothing in the seat (`user:`, `program:`,
`reward_weights`). `seat_spec(spec, entry, max_turns)` is the `GymSpec` the entry's
conversations run with: `SeatEnv` around the gym's env, the component `fidelity`, and as its
expert the gym's scripted user (`scripted_user`), which is what a user's SFT warm start imitates.
"""

from __future__ import annotations

import dataclasses
import random

from mua.errors import UsageError


def seat_gyms() -> list[str]:
    """The registered gyms whose user can take the seat."""
    from mua.gym.registry import get_gym, list_gyms

    return [n for n in list_gyms() if getattr(get_gym(n), "user_seat", None) is not None]


def check_seat(where: str, entry, spec) -> None:
    """Refuse an entry that cannot put the policy in its gym's user seat (one line)."""
    if entry.seat != "user":
        return
    if spec.user_seat is None:
        raise UsageError(
            f"{where}: gym {entry.name} has no user that can take the seat (seat: user works "
            f"with {', '.join(seat_gyms())}); remove `seat: user` or pick one of those gyms"
        )
    if entry.seat_agent().kind == "expert" and spec.expert is None:
        raise UsageError(
            f"{where}: gym {entry.name} has no scripted expert to play the agent; give "
            "`agent: {kind: llm, base_url: ..., model: ...}`"
        )
    for key, is_set in (
        ("user", entry.user is not None),
        ("program", entry.program is not None),
        ("reward_weights", bool(entry.reward_weights)),
    ):
        if is_set:
            raise UsageError(
                f"{where}: {key} does not apply with seat: user (the policy is the user and is "
                "rewarded by fidelity, docs/user_seat.md); remove it from the entry"
            )


def user_noise(options: dict) -> float:
    """The `user_noise` gym option: chance that a scripted user's reply is careless (default 0)."""
    value = options.get("user_noise", 0.0)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
        raise UsageError(f"gym.options.user_noise must be a number from 0 to 1, got {value!r}")
    return float(value)


def scripted_user(seat):
    """An expert factory for the seat: the gym's scripted user answering the agent's latest
    message; with `gym.options.user_noise` = p each reply is, with probability p, a careless
    one (`UserSeat.careless_reply`), seeded by the context seed, the task and the turn."""

    def make(ctx):
        noise = user_noise(dict(ctx.options or {}))

        async def act(messages: list[dict], task) -> dict:
            asked = next(m for m in reversed(messages) if m.get("role") == "user")
            text = str(asked.get("content") or "")
            rng = random.Random(f"{ctx.seed}:{task.task_id}:{len(messages)}:user")
            if noise > 0.0 and rng.random() < noise:
                return {"role": "assistant", "content": seat.careless_reply(rng, text, task)}
            return {"role": "assistant", "content": seat.scripted_reply(text, task)}

        return act

    return make


def seat_spec(spec, entry, max_turns: int):
    """The `GymSpec` an entry with `seat: user` runs with (`spec`: the gym's own)."""
    from mua.seat.agents import fixed_agent
    from mua.seat.env import SeatEnv

    agent_cfg = entry.seat_agent()
    shared: dict = {}

    def make_env(ctx):
        if agent_cfg.kind == "llm":  # one endpoint (connection pool) for all the entry's episodes
            if "agent" not in shared:
                shared["agent"] = fixed_agent(agent_cfg, spec, ctx)
            agent = shared["agent"]
        else:
            agent = fixed_agent(agent_cfg, spec, ctx)
        return SeatEnv(spec, ctx, agent, max_turns)

    return dataclasses.replace(
        spec,
        make_env=make_env,
        expert=scripted_user(spec.user_seat),
        reward_components={"fidelity": 1.0},
        tool_format="bracket",
        random_action=None,
        trivial_baseline=None,
        score_conversation=None,
    )
