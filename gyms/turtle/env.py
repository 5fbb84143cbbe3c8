"""Turtle environment: yes/no questions about a hidden story, then scored explanations.

`action` asks (at most `options.max_questions`, default 20); `answer` is scored per criterion
by the scripted or LLM judge (in the user seat, `ctx.user_kind == "seat"`, the scripted one). Component `story`: improvement of the best weighted score (total
at most 1); the episode ends when the score reaches 1.0.
"""

from __future__ import annotations

from gyms.common.interact import Outcome
from gyms.common.questions import QuestionEnv, improvement
from gyms.turtle import users
from gyms.turtle.reward import weighted_score

FULL_SCORE = 1.0 - 1e-9


class TurtleEnv(QuestionEnv):
    gym_name = "turtle"
    default_weights = {"story": 1.0}
    users = users
    out_of_questions = "Please tell the full story with `answer`."

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
