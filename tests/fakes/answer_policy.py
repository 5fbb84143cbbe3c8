"""A token policy for rollout tests: it answers `[answer] 3` (a bracket action) at once."""

from __future__ import annotations

from mua.engines.engine_contract import GenerationResult


class AnswerPolicy:
    kind = "tokens"
    tool_parser = "bracket"

    def __init__(self, tok):
        self.ids = tok.encode("[answer] 3", add_special_tokens=False)

    def start_step(self, step):
        pass

    def answer(self, stop_ids, max_new_tokens: int, logprob: float) -> GenerationResult:
        """The answer and its stop token, cut at `max_new_tokens`, each token at `logprob`."""
        ids = (self.ids + [stop_ids[0]])[:max_new_tokens]
        return GenerationResult(token_ids=ids, logprobs=[logprob] * len(ids), finish_reason="stop")
