"""Search gym tasks: built-in two-hop questions (`corpus.py`) and UserRL's 125 Bamboogle questions.

Built-in split: the last 4 questions are test. Bamboogle is a test set (all 125 go to test).
"""

from __future__ import annotations

from gyms.common.tasks import builtin_tasks, by_split, task_maker

GYM_NAME = "search"
CHOICES = ("search", "answer")
NUM_TEST_BUILTIN = 4
DESCRIPTION = (
    "Answer the user's question. You can search a document collection as many times as you need."
)
RULES = (
    "- `search`: a search query; the reply lists the best matching documents.\n"
    "- `answer`: a short final answer (a name, a number, a date). A correct answer ends the episode; a wrong "
    "one can be retried.\n"
    "Questions usually need several steps: find the first fact, then search for the next one."
)


def first_user(question: str) -> str:
    return f"{question}\nSearch step by step, then give a short answer."


_task = task_maker(
    GYM_NAME, DESCRIPTION, CHOICES, RULES, lambda payload: first_user(payload["question"])
)


def build_tasks(source=None, seed: int = 0, options: dict | None = None) -> dict:
    if source is None:
        from gyms.search.corpus import QUESTIONS

        return builtin_tasks(GYM_NAME, QUESTIONS, NUM_TEST_BUILTIN, _task)
    from data_prep.userrl import read_search_questions

    rows = read_search_questions(source)
    return by_split(
        [
            _task(
                f"search-{r['id']}",
                "test",
                {"question": r["question"], "answers": [r["answer"]], "hops": []},
                "userrl",
            )
            for r in rows
        ]
    )
