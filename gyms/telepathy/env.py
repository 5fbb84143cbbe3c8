"""Telepathy environment: yes/no questions about a hidden entity, then guesses.

`action` asks a question (at most `options.max_questions`, default 20); `answer` submits a
guess judged by the scripted judge or the LLM judge (`ctx.user_kind`; in the user seat,
`ctx.user_kind == "seat"`, the judge is the scripted one). Component `guess`:
max(0, score − best so far); a correct guess ends the episode.
"""

from __future__ import annotations

from gyms.common.interact import Outcome
from gyms.common.questions import QuestionEnv, improvement
from gyms.telepathy import users


class TelepathyEnv(QuestionEnv):
    gym_name = "telepathy"
    default_weights = {"guess": 1.0}
    users = users

    def format_reply(self, reply: str) -> str:
        return f"{reply}. ({self.max_questions - self.questions_asked} questions left)"

    async def on_answer(self, content: str) -> Outcome:
        if self.ctx.user_kind == "llm":
            correct = await users.llm_guess_correct(self.ctx, content, self.payload)
        else:
            correct = users.scripted_guess_correct(content, self.payload)
        score = 1.0 if correct else 0.0
        gain = improvement(score, self.best)
        self.best = max(self.best, score)
        if correct:
            return Outcome(f"Correct! It is {self.payload['name']}.", {"guess": gain}, done=True)
        return Outcome("That is not it. Keep asking or guess again.", {"guess": gain})
