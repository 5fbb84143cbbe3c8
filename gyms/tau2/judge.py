"""The NL_ASSERTION judge: one LLM call per conversation, a verdict per assertion.

The judge sees the conversation as `role: content` lines (tool calls and results included
as tau2 writes them) and the list of expected outcomes, and answers JSON
`{"results": [{"expectedOutcome", "reasoning", "metExpectation"}]}`, the shape tau2's judge
uses. The prompt is mua's own wording. Through `JudgeClient.complete_json` it is retried,
validated and cached like the user; a judge that cannot answer raises `UserFailure` (the
conversation is masked, never scored 0).
"""

from __future__ import annotations

JUDGE_PROMPT = """You grade a customer-service conversation against expected outcomes.
Grade each expected outcome on its own: is it satisfied by what the agent did and said?
Answer with one JSON object and nothing else:
{"results": [{"expectedOutcome": "<the outcome>", "reasoning": "<short reason>", "metExpectation": true or false}]}
with one entry per expected outcome, in the order given."""


def transcript(messages: list[dict]) -> str:
    return "\n".join(f"{m['role']}: {m.get('content')}" for m in messages)


def _validate(count: int):
    def check(value):
        results = value.get("results") if isinstance(value, dict) else None
        if not isinstance(results, list) or len(results) != count:
            raise ValueError(f"expected {{'results': [...]}} with {count} entries")
        for r in results:
            if not isinstance(r, dict) or not isinstance(r.get("metExpectation"), bool):
                raise ValueError("each result needs a boolean metExpectation")
        return [r["metExpectation"] for r in results]

    return check


async def judge_assertions(client, messages: list[dict], assertions: list[str]) -> list[bool]:
    """One verdict per assertion, from `client` (a `JudgeClient`)."""
    prompt = [
        {"role": "system", "content": JUDGE_PROMPT},
        {
            "role": "user",
            "content": f"conversation:\n{transcript(messages)}\n\nexpectedOutcomes:\n{assertions}",
        },
    ]
    return await client.complete_json(prompt, validate=_validate(len(assertions)))
