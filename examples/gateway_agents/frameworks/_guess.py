"""The number-guessing game the framework agents in this folder play, shared by them: the task
from `MUA_TASK`, the `guess` tool's answer, the structured answer's schema and the reward line.
It imports no framework and nothing of mua."""

from __future__ import annotations

import json
import os

from pydantic import BaseModel


class Answer(BaseModel):
    """The structured output the agents ask for."""

    number: int


class Game:
    """One task: the secret number, the range, and whether a guess or the answer found it."""

    def __init__(self) -> None:
        task = json.loads(os.environ["MUA_TASK"])
        self.target = int(task["payload"]["target"])
        self.top = int(task["payload"].get("max_number", 16))
        self.found = False
        self.mode = os.environ.get("AGENT_MODE", "tool")  # tool, structured, or both in turn
        self.model = os.environ.get("MUA_MODEL", "agent")

    def modes(self) -> list[str]:
        """The agents to run, in order: `both` is the tool agent, then the structured one."""
        return ["tool", "structured"] if self.mode == "both" else [self.mode]

    def prompt(self, mode: str) -> str:
        how = (
            "Call the guess tool with a number; I answer higher or lower."
            if mode == "tool"
            else 'Answer with one JSON object {"number": N}.'
        )
        return f"Find my secret number from 1 to {self.top}. {how}"

    def guess(self, number: int) -> str:
        """The `guess` tool: higher, lower or correct."""
        if not isinstance(number, int) or isinstance(number, bool):
            return "Guess a whole number."
        if number == self.target:
            self.found = True
            return "Correct!"
        return "higher" if number < self.target else "lower"

    def answer(self, number: int | None) -> None:
        self.found = self.found or number == self.target

    def report(self) -> None:
        print(json.dumps({"reward": 1.0 if self.found else 0.0}), flush=True)
