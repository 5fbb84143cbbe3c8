"""The leaderboard profile's part of a tau2 episode: openings, the user, tau2's step limit.

`LeaderboardEpisode(options, env, domain, task, trial)` is built by `Tau2Env.reset` under
`profile: leaderboard` (the options carry the checkout; `trial` is the trajectory's sample
index). It gives the agent's opening messages and tools (`profile.agent_opening`) with the
fields its requests add (`request`: the trial's seed, `tool_choice`), the LLM user
(`NativeUser` on `profile.user_opening`, seeded alike),
and counts tau2's orchestrator steps (every agent, user and tool message after the greeting)
so the conversation ends with tau2's `max_steps` at the checkout's DEFAULT_MAX_STEPS, and
judges NL assertions with tau2's judge prompts (`judge.py`).
Solo mode and mua's extra personas are refused: tau2's leaderboard runs with a user playing
each task's own persona.
"""

from __future__ import annotations

from functools import lru_cache

from gyms.tau2.leaderboard import profile
from gyms.tau2.leaderboard.native_user import NativeUser
from gyms.tau2.leaderboard.source import Tau2Source
from mua.errors import UsageError


@lru_cache(maxsize=8)
def source_for(checkout) -> Tau2Source:
    return Tau2Source(checkout)


class LeaderboardEpisode:
    def __init__(self, options, env, domain: str, task: dict, trial: int = 0):
        if options.solo:
            raise UsageError(
                "tau2: profile leaderboard runs with a user; drop gym.options.solo or use "
                "profile mua"
            )
        if options.persona != "task":
            raise UsageError(
                f"tau2: profile leaderboard plays each task's own persona; drop "
                f"gym.options.persona ({options.persona}) or use profile mua"
            )
        self.source = source_for(options.checkout)
        self.env, self.domain, self.task = env, domain, task
        defaults = self.source.defaults()
        self.max_steps = int(defaults["DEFAULT_MAX_STEPS"])
        self.steps = 0
        self.agent = profile.agent_opening(self.source, env, domain)
        base = defaults["DEFAULT_SEED"] if options.seed is None else options.seed
        self.seed = profile.trial_seed(int(base), trial)
        self.request = profile.request_fields(self.seed, self.agent["tools"])

    @property
    def greeting(self) -> dict:
        return self.agent["messages"][1]

    def user(self, llm) -> NativeUser:
        opening = profile.user_opening(self.source, self.env, self.domain, self.task)
        return NativeUser(llm, self.env, opening, self.seed)

    async def judge(self, client, transcript: list[dict], assertions: list[str]) -> list[bool]:
        """tau2's NL-assertion judge (its prompts and reading of the reply)."""
        from gyms.tau2.leaderboard.judge import judge

        return await judge(client, self.source, transcript, assertions)

    def step(self, messages: int = 1) -> bool:
        """Count `messages` orchestrator steps; True when tau2 would stop at max_steps."""
        self.steps += messages
        return self.steps >= self.max_steps
