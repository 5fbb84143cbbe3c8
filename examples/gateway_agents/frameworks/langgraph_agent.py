"""A number-guessing agent written with LangGraph's prebuilt ReAct agent and `ChatOpenAI`
(langchain-openai): a `guess` tool (AGENT_MODE=tool), `response_format=` (AGENT_MODE=structured:
a structured final answer, asked for in a call of its own) or both agents in turn
(AGENT_MODE=both). `ChatOpenAI` reads OPENAI_BASE_URL and OPENAI_API_KEY. It prints
{"reward": 1.0} when the number was found, else 0.0 (a reply that does not parse ends that
agent's game)."""

from __future__ import annotations

from _guess import Answer, Game
from langchain_core.exceptions import OutputParserException
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.errors import GraphRecursionError
from langgraph.prebuilt import create_react_agent
from openai import LengthFinishReasonError
from pydantic import ValidationError

game = Game()


@tool
def guess(number: int) -> str:
    """Guess the secret number."""
    return game.guess(number)


def play(llm, mode: str) -> None:
    if mode == "tool":
        agent = create_react_agent(llm, [guess], prompt=game.prompt(mode))
    else:
        agent = create_react_agent(llm, [], prompt=game.prompt(mode), response_format=Answer)
    try:
        state = agent.invoke({"messages": [("user", "Your guess?")]}, {"recursion_limit": 6})
    except (
        GraphRecursionError,
        LengthFinishReasonError,  # the structured answer was cut by the token budget
        OutputParserException,
        ValidationError,
        ValueError,
    ):
        return
    answer = state.get("structured_response")
    if isinstance(answer, Answer):
        game.answer(answer.number)


def main() -> None:
    llm = ChatOpenAI(model=game.model, max_retries=0)
    for mode in game.modes():
        play(llm, mode)
    game.report()


if __name__ == "__main__":
    main()
