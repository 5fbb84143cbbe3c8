"""`mua serve`'s OpenAI-compatible chat endpoint: POST /v1/chat/completions.

Messages (and tools) are rendered with the model's chat template, the replies sampled by the
server's engine on the base model (a loaded LoRA adapter is never used: chat names none), so a
local model can act as the simulated user (`user.kind: llm`). `n`, `seed`, `temperature`,
`top_p`, `max_tokens` / `max_completion_tokens` and `stop` strings are honoured. `ChatRoute` is a
part of `MuaServer` (mua.serve.server). A reply ends where the turn loop would end the turn (GLM:
at the next role token). Not here: streaming, tool calls in replies, log-probs.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

from mua.engines.sglang.protocol import ProtocolError
from mua.serve.refusals import HTTPError


class ChatRoute:
    """The chat completion call of `MuaServer`."""

    async def chat(self, body: Any) -> dict:
        from mua.engines.engine_contract import GenerationRequest, SamplingParams
        from mua.models import render_ids

        self._require_awake()
        if self.tokenizer is None:
            raise HTTPError(400, "this server was started without a tokenizer; chat is unavailable")
        if (
            not isinstance(body, dict)
            or not isinstance(body.get("messages"), list)
            or not body["messages"]
        ):
            raise ProtocolError("messages must be a non-empty list")
        prompt = render_ids(
            self.tokenizer, body["messages"], body.get("tools"), add_generation_prompt=True
        )
        max_tokens = body.get("max_completion_tokens") or body.get("max_tokens") or 256
        seed = body.get("seed")
        sampling = [
            SamplingParams(
                temperature=float(body.get("temperature", 1.0)),
                top_p=float(body.get("top_p", 1.0)),
                max_new_tokens=int(max_tokens),
                stop_token_ids=self._stop_ids(body.get("tools")),
                seed=None if seed is None else int(seed) + i,
            )
            for i in range(int(body.get("n", 1)))
        ]
        requests = [GenerationRequest(prompt_ids=prompt, sampling=s) for s in sampling]
        await self.lora.gate.enter(None, len(requests))  # chat runs on the base model
        try:
            results = await asyncio.wait_for(
                asyncio.gather(*(self.engine.generate(r) for r in requests)),
                self.request_timeout_s,
            )
        finally:
            await self.lora.gate.leave(None, len(requests))
        self.counts["chat"] += 1
        choices = [self._choice(i, res, body.get("stop")) for i, res in enumerate(results)]
        completion = sum(len(r.token_ids) for r in results)
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex[:16]}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model") or self.model_name,
            "choices": choices,
            "usage": {
                "prompt_tokens": len(prompt),
                "completion_tokens": completion,
                "total_tokens": len(prompt) + completion,
            },
        }

    def _choice(self, index: int, result, stop: Any) -> dict:
        text = self.tokenizer.decode(result.token_ids, skip_special_tokens=True)
        finish = "stop" if result.finish_reason == "stop" else "length"
        for s in [stop] if isinstance(stop, str) else (stop or []):
            if s and s in text:
                text, finish = text[: text.index(s)], "stop"
        return {
            "index": index,
            "message": {"role": "assistant", "content": text},
            "finish_reason": finish,
        }

    def _stop_ids(self, tools: Any = None) -> list[int]:
        """What ends a reply: the ids the turn loop stops at for this template (its end-of-turn
        token, eos, a family's other turn ends such as GLM's next role tokens); for a template
        the turn loop cannot read, eos and `<|im_end|>`."""
        from mua.errors import RunFailure
        from mua.rollout.chat_renderer import ChatRenderer

        try:
            return ChatRenderer(
                self.tokenizer, tools if isinstance(tools, list) else None
            ).stop_token_ids()
        except RunFailure:
            pass
        ids = {self.tokenizer.eos_token_id}
        end = self.tokenizer.convert_tokens_to_ids("<|im_end|>")
        if isinstance(end, int) and end != self.tokenizer.unk_token_id:
            ids.add(end)
        return sorted(i for i in ids if isinstance(i, int))
