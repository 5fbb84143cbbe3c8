"""The telepathy gym's user in the user seat (`mua.users`): it holds the entity and answers yes
or no. A reply is checked where the truth is decidable: a question naming the entity (Yes), or,
on built-in entities, one the attribute table answers (Yes or No); elsewhere only its form
(Yes, No or Maybe) is. Guesses go to the scripted judge, never to the seat."""

from __future__ import annotations

from gyms.common.text import mentions
from gyms.telepathy.users import _entity_text, names_of, scripted_answer
from mua.gym import Task
from mua.gym.user_seat import strip_choice, yes_no_seat


def _prompt(task: Task) -> str:
    return (
        f"You host twenty questions. The hidden entity is {_entity_text(task.payload)}. "
        "Answer each question with Yes, No or Maybe, truthfully, and never name the entity."
    )


def _truth(agent_text: str, task: Task) -> str | None:
    """Yes or No where the hidden entity decides the question, else None."""
    question = strip_choice(agent_text)
    if any(mentions(question, n) for n in names_of(task.payload)):
        return "Yes"
    if task.payload.get("attributes") is None:
        return None
    answer = scripted_answer(question, task.payload)
    return answer if answer in ("Yes", "No") else None


def _scripted(agent_text: str, task: Task) -> str:
    return scripted_answer(strip_choice(agent_text), task.payload)


SEAT = yes_no_seat(_prompt, _truth, _scripted)
