"""A number-guessing agent written with the OpenAI Agents SDK as its documentation shows it:
`Agent` and `Runner`, a `guess` function tool (AGENT_MODE=tool), an `output_type`
(AGENT_MODE=structured) or both agents in turn (AGENT_MODE=both). AGENT_API=responses (default)
runs the SDK's default model class (the Responses API), AGENT_API=chat its chat-completions
model class; AGENT_STREAM=1 runs it streamed (`Runner.run_streamed`). It reads OPENAI_BASE_URL
and OPENAI_API_KEY as the SDK does; a program gym also sets OPENAI_AGENTS_DISABLE_TRACING=1.
It prints {"reward": 1.0} when the number was found, else 0.0 (a reply the SDK cannot use ends
that agent's game)."""

from __future__ import annotations

import asyncio
import os

from _guess import Answer, Game
from agents import Agent, ModelBehaviorError, Runner, function_tool, set_default_openai_api
from agents.exceptions import MaxTurnsExceeded

game = Game()


@function_tool
def guess(number: int) -> str:
    """Guess the secret number."""
    return game.guess(number)


async def _streamed(agent):
    result = Runner.run_streamed(agent, "Your guess?", max_turns=3)
    async for _ in result.stream_events():
        pass
    return result


def play(mode: str) -> None:
    if mode == "tool":
        agent = Agent(
            name="guesser", instructions=game.prompt(mode), tools=[guess], model=game.model
        )
    else:
        agent = Agent(
            name="guesser", instructions=game.prompt(mode), output_type=Answer, model=game.model
        )
    try:
        if os.environ.get("AGENT_STREAM") == "1":
            result = asyncio.run(_streamed(agent))
        else:
            result = Runner.run_sync(agent, "Your guess?", max_turns=3)
    except (ModelBehaviorError, MaxTurnsExceeded):
        return
    if isinstance(result.final_output, Answer):
        game.answer(result.final_output.number)


def main() -> None:
    if os.environ.get("AGENT_API") == "chat":
        set_default_openai_api("chat_completions")
    for mode in game.modes():
        play(mode)
    game.report()


if __name__ == "__main__":
    main()
