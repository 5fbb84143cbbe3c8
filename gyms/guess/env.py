"""The guess environment: find a hidden integer in 1..N; the user answers "higher" or "lower".

The agent acts with bracket text (`[answer] 7`, parsed by the runner into the
`interact_with_env(choice, content)` tool) or the same tool through a Hermes tool call. Replies come
back as short user messages so tiny models see few tokens. Reward 1.0 for the correct number (the
episode ends), 0 otherwise. The turn limit is the recipe's `rollout.max_turns`, not the env's.
There is no tool beyond `interact_with_env`.

The user is scripted (the true verdict) by default, also under `user.kind: llm` (a user matrix
keeps this gym's scripted user). With `user.kind: llm` and the gym option `llm_user: true`, or
in the user seat (`ctx.user_kind == "seat"`, `mua.users`), the reply to every readable guess is
the user's: sent
through `ctx.llm.complete` with `user_prompt` (the hidden number) as the system message and the
guess as the user message, and shown to the agent as it came. Whether the guess was right, and
so the reward and the episode's end, stays the env's own verdict.

With the gym option `turn_cost` (c >= 0, default 0) every turn's reward is lowered by c (component
`turn_cost`), so a game won in k turns earns 1 - k c and one given up with `[finish]` or run out
of turns earns -k c: when to stop then matters.
"""

from __future__ import annotations

import re
from dataclasses import replace

from mua.errors import UsageError
from mua.gym import AgentAction, GymContext, ResetResult, StepResult, Task, ToolEnv, tool

_LEADING_INT = re.compile(r"^\s*[-+]?\d+")


def system_prompt(max_number: int) -> str:
    return f"Guess my number from 1 to {max_number}. Reply [answer] N. I say higher or lower."


def user_prompt(target: int, max_number: int) -> str:
    """The LLM user's system message: the hidden number and the three replies it may give."""
    return (
        f"You picked the number {target} (from 1 to {max_number}). The player guesses it. "
        "Reply to each guess with one word: higher, lower or correct. Never say the number."
    )


def turn_cost(options: dict) -> float:
    """The `turn_cost` gym option: what every turn costs (default 0)."""
    value = options.get("turn_cost", 0.0)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise UsageError(f"gym.options.turn_cost must be a number >= 0, got {value!r}")
    return float(value)


def verdict_word(guess: int, target: int) -> str:
    """The true reply to `guess`: higher, lower or correct."""
    return "correct" if guess == target else ("higher" if guess < target else "lower")


class GuessEnv(ToolEnv):
    """One episode; `interact_with_env` records the verdict of the last guess in `self._verdict`."""

    def __init__(self, ctx: GymContext):
        self.ctx = ctx
        self.target = 0
        self.max_number = 16
        self._verdict: str | None = None
        self.turn_cost = turn_cost(ctx.options)

    async def reset(self, task: Task) -> ResetResult:
        self.target = int(task.payload["target"])
        self.max_number = int(task.payload.get("max_number", 16))
        return ResetResult(messages=[dict(m) for m in task.prompt], tools=[])

    @tool
    async def interact_with_env(self, choice: str, content: str = "") -> str:
        """Act in the game.

        Args:
            choice: `answer` to guess a number; `finish` gives up.
            content: the guessed number for `answer`.
        """
        choice = choice.strip().lower()
        if choice == "finish":
            self._verdict = "finish"
            return "Game over."
        if choice != "answer":
            self._verdict = "invalid"
            return "Guess with [answer] N."
        match = _LEADING_INT.match(content)
        if match is None:
            self._verdict = "invalid"
            return f"Give a number from 1 to {self.max_number}."
        guess = int(match.group(0))
        self._verdict = "correct" if guess == self.target else "wrong"
        if self.ctx.user_kind == "seat" or (
            self.ctx.user_kind == "llm" and self.ctx.options.get("llm_user") is True
        ):
            return await self._ask_user(guess)
        if guess == self.target:
            return "Correct!"
        return verdict_word(guess, self.target)

    async def _ask_user(self, guess: int) -> str:
        from mua.gym import UserFailure

        if self.ctx.llm is None:
            raise UserFailure("the guess gym's LLM user has no client configured")
        messages = [
            {"role": "system", "content": user_prompt(self.target, self.max_number)},
            {"role": "user", "content": f"[answer] {guess}"},
        ]
        return (await self.ctx.llm.complete(messages)).strip()

    async def step(self, action: AgentAction) -> StepResult:
        result = await self._play(action)
        if not self.turn_cost:
            return result
        components = {**result.components, "turn_cost": -self.turn_cost}
        return replace(result, reward=result.reward - self.turn_cost, components=components)

    async def _play(self, action: AgentAction) -> StepResult:
        self._verdict = None
        errors: dict[str, int] = {}
        if action.parse_errors:
            errors["parse_error"] = len(action.parse_errors)
            return self._reply(f"Could not read that: {action.parse_errors[0]}", errors)
        if not action.tool_calls:
            errors["no_action"] = 1
            return self._reply("Guess with [answer] N.", errors)
        message, kind = await self.call_tool(action.tool_calls[0])
        if kind:
            errors[kind] = 1
        elif self._verdict == "invalid":
            errors["bad_answer"] = 1
        reward = 1.0 if self._verdict == "correct" else 0.0
        done = self._verdict in ("correct", "finish")
        weight = self.ctx.reward_weights.get("correct", 1.0)
        return StepResult(
            messages=[{"role": "user", "content": message["content"]}],
            reward=reward * weight,
            components={"correct": reward * weight},
            done=done,
            info={"errors": errors} if errors else {},
        )

    @staticmethod
    def _reply(text: str, errors: dict[str, int]) -> StepResult:
        return StepResult(messages=[{"role": "user", "content": text}], info={"errors": errors})

    async def close(self) -> None:
        return None
