"""Search environment: query a retrieval backend, then answer a (multi-hop) question.

`search` returns the top `options.top_k` passages; `answer` pays 1 on a normalised exact match
(or, with an LLM user and `options.llm_judge` left on, when the judge accepts it) and ends; a
wrong answer pays 0 and may be retried. `action` is not available. By `gym.options.rules`:
`upstream` (default; UserRL's setup) returns the top 5 and allows 5 searches per episode (a
further search gets UserRL's "maximum number of search steps" reply, reward 0), `mua` returns
the top 3 with no cap; `top_k` and `max_searches` override either. Public (Bamboogle) tasks need
a real backend (`corpus_path` or `retriever_url`): against the built-in fictional corpus they
are unanswerable, so `reset` refuses them with a UsageError.
"""

from __future__ import annotations

from gyms.common.interact import InteractEnv, Outcome
from gyms.search import users
from gyms.search.index import get_backend, is_builtin
from gyms.search.reward import exact_match
from mua.errors import UsageError

MAX_SNIPPET_CHARS = 600
LIMITS = {"upstream": (5, 5), "mua": (3, 0)}  # rules -> (top_k, max searches; 0: no cap)
SEARCH_CAP_REPLY = (
    "You have reached the maximum number of search steps. Please provide an answer in your "
    "next action. Do not search again."
)


class SearchEnv(InteractEnv):
    gym_name = "search"
    choices = ("search", "answer")
    default_weights = {"answer": 1.0}

    def __init__(self, ctx):
        super().__init__(ctx)
        self.backend = get_backend(self.options)
        top_k, cap = LIMITS[self.rules]
        self.top_k = int(self.options.get("top_k", top_k))
        self.max_searches = int(self.options.get("max_searches", cap))

    def needs_llm(self) -> bool:
        return bool(self.options.get("llm_judge", True))

    def setup(self, task) -> None:
        if task.source != "builtin" and is_builtin(self.backend):
            raise UsageError(
                f"search task {task.task_id}: public questions cannot be answered from the built-in "
                "corpus; set gym.options.corpus_path (a passage file) or gym.options.retriever_url"
            )
        self.payload = task.payload
        self.searches = 0

    async def on_search(self, content: str) -> Outcome:
        self.searches += 1
        if self.max_searches and self.searches > self.max_searches:
            return Outcome(SEARCH_CAP_REPLY)
        hits = await self.backend.search(content, self.top_k)
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
