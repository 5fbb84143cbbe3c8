"""A `gyms:` entry with `seat: user` at run time: the spec its conversations run with.

`seat_spec(spec, entry, max_turns)` is that `GymSpec`: `SeatEnv` around the gym's env, the
component `fidelity`, and as its expert the gym's scripted user (`scripted_user`), which is what
a user's SFT warm start imitates. `seated(run)` gives a `mua.gym.mix.GymRun` of such an entry
that spec (every verb that runs conversations calls it on its runs); other runs are returned
as they are. The entry's checks are `mua.gym.user_seat.check_seat`.
"""

from __future__ import annotations

import dataclasses
import random

from mua.errors import UsageError


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
            asked = [str(m.get("content") or "") for m in messages if m.get("role") == "user"]
            rng = random.Random(f"{ctx.seed}:{task.task_id}:{len(messages)}:user")
            if noise > 0.0 and rng.random() < noise:
                return {"role": "assistant", "content": seat.careless_reply(rng, asked[-1], task)}
            return {"role": "assistant", "content": seat.reply_to(asked, task)}

        return act

    return make


def judge_components(entry) -> dict[str, float]:
    """The components a fidelity judge adds: `judge` and one per rubric criterion."""
    if getattr(entry, "fidelity_judge", None) is None:
        return {}
    from mua.users.seat_judge import CRITERIA

    return {"judge": 1.0, **{f"judge_{name}": 1.0 for name in CRITERIA}}


def seat_spec(spec, entry, max_turns: int):
    """The `GymSpec` an entry with `seat: user` runs with (`spec`: the gym's own)."""
    from mua.users.seat_agents import fixed_agent
    from mua.users.seat_env import SeatEnv

    agent_cfg = entry.seat_agent()
    shared: dict = {}

    def make_env(ctx):
        if agent_cfg.kind == "llm":  # one endpoint (connection pool) for all the entry's episodes
            if "agent" not in shared:
                shared["agent"] = fixed_agent(agent_cfg, spec, ctx)
            agent = shared["agent"]
        else:
            agent = fixed_agent(agent_cfg, spec, ctx)
        judge = None
        if entry.fidelity_judge is not None:
            if "judge" not in shared:
                from mua.users.seat_judge import judge_client

                shared["judge"] = judge_client(entry.fidelity_judge, entry.key)
            judge = (shared["judge"], entry.fidelity_judge.weight)
        return SeatEnv(spec, ctx, agent, max_turns, judge)

    return dataclasses.replace(
        spec,
        make_env=make_env,
        expert=scripted_user(spec.user_seat),
        reward_components={"fidelity": 1.0, **judge_components(entry)},
        tool_format="bracket",
        random_action=None,
        trivial_baseline=None,
        score_conversation=None,
    )


def seated(run):
    """`run` (a GymRun) with the user seat's spec when its entry says `seat: user`."""
    entry = run.entry
    if entry is None or getattr(entry, "seat", "agent") != "user" or run.spec.user_seat is None:
        return run
    if run.seated:
        return run
    spec = seat_spec(run.spec, entry, run.rollout_cfg.max_turns)
    return dataclasses.replace(run, spec=spec, seated=True)
