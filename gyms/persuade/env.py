"""Persuasion environment: argue against a claim the persuadee holds.

`action` or `answer` sends an argument (UserRL used `answer`; both are accepted). The persuadee
replies with its stance. Component `persuade`: (new maximum stance − previous maximum) / 6;
the episode ends at Strongly Disagree.
"""

from __future__ import annotations

from gyms.common.interact import InteractEnv, Outcome
from gyms.persuade import users
from gyms.persuade.reward import MAX_LEVEL, STANCES, new_maximum_reward


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
        if self.ctx.user_kind == "llm":
            reply, level = await users.llm_turn(self.ctx, content, self.payload, self.history)
            reply = f"{reply} My stance: {STANCES[level]}."
        else:
            reply, level = users.scripted_turn(content, self.payload, self.raised, self.level)
        self.history.append((content, reply))
        reward = new_maximum_reward(level, self.best_level)
        self.level, self.best_level = level, max(self.best_level, level)
        return Outcome(reply, {"persuade": reward}, done=level >= MAX_LEVEL)

    async def on_answer(self, content: str) -> Outcome:
        return await self.on_action(content)
