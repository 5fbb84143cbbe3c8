"""A `RolloutEngine` for gateway tests: each request is answered with the next scripted text
(then `<|im_end|>`), log-prob -0.25 per token, cut at the request's `max_new_tokens` as an engine
cuts it (finish reason `length`); every prompt and every sampled id list is kept."""

from __future__ import annotations

from mua.engines.engine_contract import GenerationResult


class ScriptedEngine:
    def __init__(self, tokenizer, replies):
        self.tokenizer = tokenizer
        self.replies = replies  # a list (popped in order) or a function of the prompt's text
        self.prompts: list[list[int]] = []
        self.sampled: list[list[int]] = []

    async def generate(self, request):
        self.prompts.append(list(request.prompt_ids))
        if callable(self.replies):
            text = self.replies(self.tokenizer.decode(request.prompt_ids))
        else:
            text = self.replies.pop(0)
        ids = self.tokenizer.encode(text + "<|im_end|>", add_special_tokens=False)
        budget = request.sampling.max_new_tokens
        finish = "stop" if len(ids) <= budget else "length"
        ids = ids[:budget]
        self.sampled.append(ids)
        return GenerationResult(ids, [-0.25] * len(ids), finish)
