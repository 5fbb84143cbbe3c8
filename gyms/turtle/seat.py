"""The turtle gym's user in the user seat (`mua.users`): the host, who knows the hidden story and
answers yes-or-no questions about it. A reply must be Yes, No or Maybe; a question that asks
whether one of the story's key points (its criteria statements) is true must get Yes. Other
questions are not decided (the scripted oracle's word overlap is a heuristic, not the truth).
Explanations go to the scripted judge, never to the seat."""

from __future__ import annotations

from gyms.common.text import normalize_answer
from gyms.turtle.users import scripted_answer
from mua.gym import Task
from mua.gym.user_seat import strip_choice, yes_no_seat


def _prompt(task: Task) -> str:
    return (
        "You host a lateral-thinking puzzle. The player knows only this: "
        f"{task.payload['surface']}\nThe hidden truth: {task.payload['bottom']}\n"
        "Answer each question with Yes, No or Maybe, truthfully, without revealing more."
    )


def _truth(agent_text: str, task: Task) -> str | None:
    question = normalize_answer(strip_choice(agent_text))
    for criterion in task.payload.get("criteria") or []:
        statement = normalize_answer(criterion.get("statement", ""))
        if statement and statement in question:
            return "Yes"
    return None


def _scripted(agent_text: str, task: Task) -> str:
    return _truth(agent_text, task) or scripted_answer(strip_choice(agent_text), task.payload)


SEAT = yes_no_seat(_prompt, _truth, _scripted)
