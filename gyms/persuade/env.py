"""Persuasion environment: argue against a claim the persuadee holds.

`action` or `answer` sends an argument (UserRL used `answer`; both are accepted). Component
`persuade`, by `gym.options.rules`: `upstream` pays every forward move (levels moved / 6, as
UserRL), `mua` only a new maximum stance ((new maximum − previous maximum) / 6). The LLM
persuadee's reply is shown as is under `upstream` (the agent reads the stance change from the
reward line) and followed by "My stance: ..." under `mua`. The episode ends at Strongly Disagree.
"""

from __future__ import annotations

from gyms.common.interact import InteractEnv, Outcome
from gyms.persuade import users
from gyms.persuade.reward import (
    MAX_LEVEL,
    STANCES,
    forward_move_reward,
    new_maximum_reward,
)


class PersuadeEnv(InteractEnv):
    gym_name = "persuade"
    choices = ("action", "answer")
    default_weights = {"persuade": 1.0}

    def setup(self, task) -> None:
        self.payload = task.payload
        self.level = 0
        self.best_level = 0
        self.raised: set[int] = set()
        self.history: list[tuple[str, str]] = []

    async def on_action(self, content: str) -> Outcome:
        if self.ctx.user_kind in ("llm", "seat"):  # the seat: the trained policy (mua.users)
            reply, level = await users.llm_turn(
                self.ctx, content, self.payload, self.history, self.level
            )
            self.history.append((content, reply))
            if self.rules == "mua":
                reply = f"{reply} My stance: {STANCES[level]}."
        else:
            reply, level = users.scripted_turn(content, self.payload, self.raised, self.level)
            self.history.append((content, reply))
        if self.rules == "upstream":
            reward = forward_move_reward(level, self.level)
        else:
            reward = new_maximum_reward(level, self.best_level)
        self.level, self.best_level = level, max(self.best_level, level)
        return Outcome(reply, {"persuade": reward}, done=level >= MAX_LEVEL)

    async def on_answer(self, content: str) -> Outcome:
        return await self.on_action(content)
