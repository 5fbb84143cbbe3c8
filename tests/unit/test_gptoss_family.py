"""The gpt-oss chat family (harmony) reads what the tiny gpt-oss model samples. The tiny tokenizer
has no harmony tokens, so its random-weight samples are plain text: read as text; the same text
as the body of a call to `functions.guess` (no JSON object) is a parse error, never an exception."""

from __future__ import annotations

import asyncio

import torch

from mua.engines.engine_contract import GenerationRequest, SamplingParams
from mua.engines.hf.hf_engine import HFEngine
from mua.families.gpt_oss import parse
from mua.models import load_model, load_tokenizer

MODEL = "tiny:gptoss-2m"


def _sampled_turns(count: int) -> list[str]:
    torch.manual_seed(0)
    engine = HFEngine(load_model(MODEL, attn_implementation="sdpa", seed=0).eval())
    tok = load_tokenizer(MODEL)
    prompt = tok.encode("Guess the number between 1 and 10.", add_special_tokens=False)
    requests = [
        GenerationRequest(prompt, SamplingParams(max_new_tokens=24, seed=i)) for i in range(count)
    ]

    async def run():
        return await asyncio.gather(*(engine.generate(r) for r in requests))

    return [tok.decode(r.token_ids) for r in asyncio.run(run())]


def test_the_harmony_parser_reads_the_tiny_models_sampled_turns():
    turns = _sampled_turns(4)
    assert len(set(turns)) == 4 and all(turns)
    for text in turns:
        action = parse(text)
        assert "<|" not in text and action.tool_calls == [] and action.parse_errors == []
        assert action.text == text.strip()
        call = (
            f"<|start|>assistant<|channel|>commentary to=functions.guess<|message|>{text}<|call|>"
        )
        action = parse(call)
        assert action.tool_calls == [] and len(action.parse_errors) >= 1
