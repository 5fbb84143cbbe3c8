"""The guess game's taskset, task (reward) and env (the higher/lower protocol)."""

from __future__ import annotations

import os
import random
import re
import sys
import time

import verifiers.v1 as vf

PROMPT = "Guess my number from 1 to {high}. Reply [answer] N. I say higher or lower."


class GuessData(vf.TaskData):
    target: int


class GuessTask(vf.Task[GuessData]):
    @vf.reward
    async def correct(self, task, trace) -> float:
        """1 when the player's last reply names the hidden number."""
        replies = [m for m in trace.messages if m.role == "assistant"]
        if any("nan" in str(m.content) for m in replies):
            return float("nan")  # a test hook: a reward that is not a number
        return float(bool(replies) and guess_of(replies[-1].content) == task.target)


class GuessTasksetConfig(vf.TasksetConfig):
    num_tasks: int = 12
    high: int = 4
    seed: int = 0


class GuessTaskset(vf.Taskset[GuessTask, GuessTasksetConfig]):
    def load(self):
        rng = random.Random(self.config.seed)
        for i in range(self.config.num_tasks):
            data = GuessData(
                id=f"guess-{i}",
                prompt=PROMPT.format(high=self.config.high),
                target=rng.randint(1, self.config.high),
            )
            yield GuessTask(data, self.config.task)


class GuessEnvConfig(vf.EnvConfig):
    player: vf.AgentConfig = vf.AgentConfig(harness={"id": "null"})
    max_guesses: int = 3


def guess_of(text) -> int | None:
    numbers = re.findall(r"-?\d+", text if isinstance(text, str) else str(text))
    return int(numbers[-1]) if numbers else None


def _test_hook(reply: str) -> None:
    if "crash" in reply:
        print("vf_guess: crashing as asked", file=sys.stderr, flush=True)
        os._exit(3)
    if "hang" in reply:
        time.sleep(3600)
    if "noise" in reply:
        print("not json", flush=True)
    if "raise" in reply:
        raise RuntimeError("vf_guess: raising as asked")


class GuessEnv(vf.Env[GuessEnvConfig]):
    async def run(self, task, agents):
        async with agents.player.interaction(task) as game:
            segment = await game.turn()
            for _ in range(self.config.max_guesses - 1):
                if segment.terminated:
                    return
                _test_hook(segment.last_reply)
                if "fork" in segment.last_reply:  # a test hook: a second run of the seat
                    async with agents.player.interaction(task) as other:
                        await other.turn()
                guess = guess_of(segment.last_reply)
                if guess == task.data.target:
                    return
                hint = (
                    "Give a number."
                    if guess is None
                    else ("higher" if guess < task.data.target else "lower")
                )
                segment = await game.turn(hint)
