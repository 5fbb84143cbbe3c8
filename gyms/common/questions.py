"""Question-asking gyms: yes/no questions about something hidden, within a budget, then answers.

`QuestionEnv` is an `InteractEnv` whose `action` asks the hidden-answer user one question, at
most `options.max_questions` (default 20) per episode; a question past the budget gets
`out_of_questions` instead of an answer. The reply comes from the gym's `users` module:
`llm_answer(ctx, question, payload)` with the LLM user or in the user seat (`ctx.user_kind`
"llm" or "seat", `mua.users`), else `scripted_answer(question, payload)`.
`improvement` is the reward these gyms pay for an answer: only what beats the best so far.
Subclasses implement `on_answer` (scoring) and may reformat replies with `format_reply`.
"""

from __future__ import annotations

from types import ModuleType

from gyms.common.interact import InteractEnv, Outcome


def improvement(score: float, best_so_far: float) -> float:
    """The reward for an answer scoring `score`: how much it beats the best so far (never < 0)."""
    return max(0.0, score - best_so_far)


class QuestionEnv(InteractEnv):
    choices = ("action", "answer")
    users: ModuleType  # the gym's user module (llm_answer, scripted_answer)
    out_of_questions = "Please give your answer."

    def setup(self, task) -> None:
        self.payload = task.payload
        self.max_questions = int(self.options.get("max_questions", 20))
        self.questions_asked = 0
        self.best = 0.0

    def format_reply(self, reply: str) -> str:
        return f"{reply}."

    async def on_action(self, content: str) -> Outcome:
        if self.questions_asked >= self.max_questions:
            return Outcome(
                f"You have used all {self.max_questions} questions. {self.out_of_questions}"
            )
        self.questions_asked += 1
        if self.ctx.user_kind in ("llm", "seat"):
            reply = await self.users.llm_answer(self.ctx, content, self.payload)
        else:
            reply = self.users.scripted_answer(content, self.payload)
        return Outcome(self.format_reply(reply))
