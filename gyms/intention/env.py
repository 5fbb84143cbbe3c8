"""Intention environment: clarifying questions about a vague request.

Each `action` question is judged for which missing details it covers; the requester answers
only those. Component `clarify` per question (see reward.py); the episode ends when every
missing detail is covered. The requester never sees the list of missing details. In the user
seat (`ctx.user_kind == "seat"`, `mua.users`) the trained policy is the requester and the judge
is the scripted one.
"""

from __future__ import annotations

from gyms.common.interact import InteractEnv, Outcome
from gyms.intention import users
from gyms.intention.reward import question_reward


class IntentionEnv(InteractEnv):
    gym_name = "intention"
    choices = ("action",)
    default_weights = {"clarify": 1.0}

    def setup(self, task) -> None:
        self.payload = task.payload
        self.details = task.payload["missing_details"]
        self.covered: set[int] = set()

    async def on_action(self, content: str) -> Outcome:
        if self.ctx.user_kind == "llm":
            hits = await users.llm_covered(self.ctx, content, self.payload)
        else:
            hits = users.scripted_covered(content, self.details)
        new = [i for i in hits if i not in self.covered]
        reward = question_reward([int(self.details[i]["importance"]) for i in new])
        self.covered.update(hits)
        revealed = [self.details[i] for i in hits]
        if self.ctx.user_kind in ("llm", "seat"):
            reply = await users.llm_reply(self.ctx, content, self.payload, revealed)
        else:
            reply = users.scripted_reply(revealed)
        done = len(self.covered) == len(self.details)
        if done:
            reply += " I think that covers everything I need. Thanks!"
        return Outcome(reply, {"clarify": reward}, done=done)
