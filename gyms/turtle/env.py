"""Turtle environment: yes/no questions about a hidden story, then scored explanations.

`action` asks (at most `options.max_questions`, default 20); `answer` is scored per criterion
by the scripted or LLM judge. Component `story`: improvement of the best weighted score (total
at most 1); the episode ends when the score reaches 1.0.
"""

from __future__ import annotations

from gyms.common.interact import InteractEnv, Outcome
from gyms.turtle import users
from gyms.turtle.reward import improvement, weighted_score

FULL_SCORE = 1.0 - 1e-9


class TurtleEnv(InteractEnv):
    gym_name = "turtle"
    choices = ("action", "answer")
    default_weights = {"story": 1.0}

    def setup(self, task) -> None:
        self.payload = task.payload
        self.max_questions = int(self.options.get("max_questions", 20))
        self.questions_asked = 0
        self.best = 0.0

    async def on_action(self, content: str) -> Outcome:
        if self.questions_asked >= self.max_questions:
            return Outcome(
                f"You have used all {self.max_questions} questions. Please tell the full story with `answer`."
            )
        self.questions_asked += 1
        if self.ctx.user_kind == "llm":
            reply = await users.llm_answer(self.ctx, content, self.payload)
        else:
            reply = users.scripted_answer(content, self.payload)
        return Outcome(f"{reply}.")

    async def on_answer(self, content: str) -> Outcome:
        if self.ctx.user_kind == "llm":
            scores = await users.llm_scores(self.ctx, content, self.payload)
        else:
            scores = users.scripted_scores(content, self.payload)
        score = weighted_score(scores, self.payload["criteria"])
        gain = improvement(score, self.best)
        self.best = max(self.best, score)
        if self.best >= FULL_SCORE:
            return Outcome("You uncovered the whole story. Well done!", {"story": gain}, done=True)
        met = sum(1 for s in scores if s >= 1.0)
        return Outcome(
            f"Your explanation fully covers {met} of {len(scores)} key points (score {score:.2f}, best {self.best:.2f}). "
            "Keep asking or answer again.",
            {"story": gain},
        )
