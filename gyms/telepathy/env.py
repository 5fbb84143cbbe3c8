"""Telepathy environment: yes/no questions about a hidden entity, then guesses.

`action` asks a question (at most `options.max_questions`, default 20); `answer` submits a
guess judged by the scripted judge or the LLM judge (`ctx.user_kind`). Component `guess`:
max(0, score − best so far); a correct guess ends the episode.
"""

from __future__ import annotations

from gyms.common.interact import InteractEnv, Outcome
from gyms.telepathy import users
from gyms.telepathy.reward import improvement


class TelepathyEnv(InteractEnv):
    gym_name = "telepathy"
    choices = ("action", "answer")
    default_weights = {"guess": 1.0}

    def setup(self, task) -> None:
        self.payload = task.payload
        self.max_questions = int(self.options.get("max_questions", 20))
        self.questions_asked = 0
        self.best = 0.0

    async def on_action(self, content: str) -> Outcome:
        if self.questions_asked >= self.max_questions:
            return Outcome(
                f"You have used all {self.max_questions} questions. Please give your answer."
            )
        self.questions_asked += 1
        if self.ctx.user_kind == "llm":
            reply = await users.llm_answer(self.ctx, content, self.payload)
        else:
            reply = users.scripted_answer(content, self.payload)
        left = self.max_questions - self.questions_asked
        return Outcome(f"{reply}. ({left} questions left)")

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
