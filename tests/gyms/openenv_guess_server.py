"""An OpenEnv environment server (openenv 0.10.0) that plays the guess game, for tests.

Run with the OpenEnv side venv: `tests/.openenv/venv/bin/python tests/gyms/openenv_guess_server.py
PORT`. `reset(target=N)` starts a game; an action `{"message": text}` guesses the first integer
in the text (reward 1 and done when right). Faults on purpose: a message `crash` ends the server,
`hang` never answers, `flood` answers 100000 characters.
"""

from __future__ import annotations

import os
import re
import sys
import time
from typing import Any

import uvicorn
from openenv.core.env_server.http_server import create_app
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import Action, Observation, State


class GuessAction(Action):
    message: str = ""


class GuessObservation(Observation):
    feedback: str = ""


class GuessEnv(Environment):
    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self):
        super().__init__()
        self.target = 0
        self._state = State(episode_id=None, step_count=0)

    def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any):
        self.target = int(kwargs.get("target", 1))
        self._state = State(episode_id=episode_id, step_count=0)
        return GuessObservation(feedback="Your guess?")

    def step(self, action: GuessAction, timeout_s: float | None = None, **kwargs: Any):
        self._state.step_count += 1
        text = action.message.strip()
        if text == "crash":
            print("crashing on purpose", file=sys.stderr, flush=True)
            os._exit(3)
        if text == "hang":
            time.sleep(3600)
        if text == "flood":
            return GuessObservation(feedback="x" * 100000)
        match = re.search(r"-?\d+", text)
        if match is None:
            return GuessObservation(feedback="Give a number.")
        guess = int(match.group(0))
        if guess == self.target:
            return GuessObservation(feedback="Correct!", reward=1.0, done=True)
        return GuessObservation(feedback="higher" if guess < self.target else "lower", reward=0.0)

    @property
    def state(self) -> State:
        return self._state


app = create_app(GuessEnv, GuessAction, GuessObservation, env_name="guess", max_concurrent_envs=64)

if __name__ == "__main__":
    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
