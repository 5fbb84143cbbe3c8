"""Search environment: query a local BM25 index, then answer a multi-hop question.

`search` returns the top `options.top_k` (default 3) documents; `answer` pays 1 on a normalised
exact match (or, with an LLM user and `options.llm_judge` left on, when the judge accepts it)
and ends; a wrong answer pays 0 and may be retried. `action` is not available.
"""

from __future__ import annotations

from gyms.common.interact import InteractEnv, Outcome
from gyms.search import users
from gyms.search.index import get_index
from gyms.search.reward import exact_match

MAX_SNIPPET_CHARS = 600


class SearchEnv(InteractEnv):
    gym_name = "search"
    choices = ("search", "answer")
    default_weights = {"answer": 1.0}

    def __init__(self, ctx):
        super().__init__(ctx)
        self.index = get_index(self.options)
        self.top_k = int(self.options.get("top_k", 3))

    def needs_llm(self) -> bool:
        return bool(self.options.get("llm_judge", True))

    def setup(self, task) -> None:
        self.payload = task.payload

    async def on_search(self, content: str) -> Outcome:
        hits = self.index.search(content, self.top_k)
        if not hits:
            return Outcome(f"No results for {content[:100]!r}. Try other words.")
        lines = [
            f"[{i + 1}] {d['title']}: {d['text'][:MAX_SNIPPET_CHARS]}" for i, d in enumerate(hits)
        ]
        return Outcome("\n".join(lines))

    async def on_answer(self, content: str) -> Outcome:
        gold = self.payload["answers"]
        correct = exact_match(content, gold)
        if not correct and self.ctx.user_kind == "llm" and self.needs_llm():
            correct = await users.llm_answer_correct(
                self.ctx, self.payload["question"], gold, content
            )
        if correct:
            return Outcome("Correct!", {"answer": 1.0}, done=True)
        return Outcome(
            "That answer is not correct. You may search more and answer again.", {"answer": 0.0}
        )
