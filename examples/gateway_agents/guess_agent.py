"""A number-guessing agent written with the `openai` SDK only: its own system prompt, its own
`guess` tool and its own tool loop. It knows nothing of mua.

Run by a program gym (docs/gateway.md) it reads `OPENAI_BASE_URL`, `OPENAI_API_KEY` and
`MUA_TASK` (the task as JSON: the secret number is `payload.target`, the range
`payload.max_number`) and prints `{"reward": 1.0}` when it found the number, else 0.0.
`GUESS_AGENT_ROUNDS` (default 4) bounds its guesses; `GUESS_AGENT_TRIM=1` makes it send only its
system prompt and the latest message each turn (a trimmed history: the gateway splits it).
`play(base_url, api_key, task)` is the same agent as an entry point.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys

from openai import AsyncOpenAI

SYSTEM = (
    "We play a game: find my secret number from 1 to {n}. Call the guess tool with a number, "
    "or write [answer] N. I answer higher or lower."
)
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "guess",
            "description": "Guess the secret number.",
            "parameters": {
                "type": "object",
                "properties": {"number": {"type": "integer"}},
                "required": ["number"],
            },
        },
    }
]
ANSWER = re.compile(r"\[\s*answer\s*\]\s*(-?\d+)", re.I)


def read_guess(message) -> tuple[int | None, list[str]]:
    """The number the model guessed (a `guess` call, else `[answer] N` in its text) and the ids
    of its tool calls (each needs an answer)."""
    calls = list(message.tool_calls or [])
    for call in calls:
        try:
            number = json.loads(call.function.arguments or "{}").get("number")
        except (ValueError, AttributeError):
            continue
        if call.function.name == "guess" and isinstance(number, int):
            return number, [c.id for c in calls]
    match = ANSWER.search(message.content or "")
    return (int(match.group(1)) if match else None), [c.id for c in calls]


def verdict(guess: int | None, target: int) -> str:
    if guess is None:
        return "Call the guess tool with a number, or write [answer] N."
    if guess == target:
        return "Correct!"
    return "higher" if guess < target else "lower"


async def play(
    base_url: str, api_key: str, task: dict, rounds: int = 4, trim: bool = False
) -> float:
    target = int(task["payload"]["target"])
    top = int(task["payload"].get("max_number", 16))
    client = AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=0)
    messages: list[dict] = [
        {"role": "system", "content": SYSTEM.format(n=top)},
        {"role": "user", "content": "Your guess?"},
    ]
    try:
        for _ in range(rounds):
            sent = [messages[0], messages[-1]] if trim else messages
            reply = await client.chat.completions.create(
                model=os.environ.get("MUA_MODEL", "agent"), messages=sent, tools=TOOLS
            )
            message = reply.choices[0].message
            messages.append(message.model_dump(exclude_none=True))
            guess, call_ids = read_guess(message)
            answer = verdict(guess, target)
            if call_ids:
                messages += [
                    {"role": "tool", "tool_call_id": i, "content": answer} for i in call_ids
                ]
            else:
                messages.append({"role": "user", "content": answer})
            if guess == target:
                return 1.0
        return 0.0
    finally:
        await client.close()


def main() -> None:
    task = json.loads(os.environ["MUA_TASK"])
    reward = asyncio.run(
        play(
            os.environ["OPENAI_BASE_URL"],
            os.environ["OPENAI_API_KEY"],
            task,
            rounds=int(os.environ.get("GUESS_AGENT_ROUNDS", "4")),
            trim=os.environ.get("GUESS_AGENT_TRIM") == "1",
        )
    )
    print(json.dumps({"reward": reward}))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
