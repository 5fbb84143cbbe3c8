"""A number-guessing agent written with pydantic-ai (`pydantic-ai-slim[openai]`): an `Agent` on
an OpenAI chat model with a `guess` tool (AGENT_MODE=tool), an `output_type` (AGENT_MODE=
structured: pydantic-ai's output tool, sent with tool_choice required) or both agents in turn
(AGENT_MODE=both). `openai:` models (the default, AGENT_API=responses) call the Responses API,
`openai-chat:` ones (AGENT_API=chat) chat completions; the OpenAI provider reads OPENAI_BASE_URL
and OPENAI_API_KEY. It prints
{"reward": 1.0} when the number was found, else 0.0 (a reply pydantic-ai cannot use ends that
agent's game)."""

from __future__ import annotations

import os

from _guess import Answer, Game
from pydantic_ai import Agent, UnexpectedModelBehavior, UsageLimitExceeded
from pydantic_ai.usage import UsageLimits

game = Game()


def play(mode: str) -> None:
    kind = "openai-chat" if os.environ.get("AGENT_API") == "chat" else "openai"
    model = f"{kind}:{game.model}"
    if mode == "tool":
        agent = Agent(model, instructions=game.prompt(mode))

        @agent.tool_plain
        def guess(number: int) -> str:
            """Guess the secret number."""
            return game.guess(number)
    else:
        agent = Agent(model, instructions=game.prompt(mode), output_type=Answer, retries=0)
    try:
        result = agent.run_sync("Your guess?", usage_limits=UsageLimits(request_limit=3))
    except (UnexpectedModelBehavior, UsageLimitExceeded):
        return
    if isinstance(result.output, Answer):
        game.answer(result.output.number)


def main() -> None:
    for mode in game.modes():
        play(mode)
    game.report()


if __name__ == "__main__":
    main()
