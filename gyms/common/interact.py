"""The `interact_with_env(choice, content)` environment shared by the UserRL-style gyms.

`InteractEnv` is a `ToolEnv` with one tool. `choice` is one of `action` (talk to the user or
environment), `search` (query a tool or database), `answer` (submit) and `finish` (end the
episode; always reachable). `gym.options.rules` (see `rules.py`) decides two things here: under
`upstream` a turn without a tool call ends the episode with reward 0 and every observation of
the tool ends with `"\nReward: <r>"` (r: what that call earned, weighted); under `mua` a turn
without a tool call counts as `action` with the turn's text and observations carry no reward.
Subclasses implement `on_action`, `on_search`, `on_answer` (only for the choices they list in
`choices`) and return an `Outcome`; this class weights the named reward components, ends the
episode, counts mistakes in `info["errors"]`, and lets a `UserFailure` from a judge escape the
step instead of becoming an observation. It does not parse model text: the runner turns
`[choice] content` text into the same tool call before `step` sees it.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Literal

from gyms.common.rules import no_tool_call_ending, rule_set, with_reward
from mua.errors import UsageError
from mua.gym import (
    AgentAction,
    GymContext,
    ResetResult,
    StepResult,
    Task,
    ToolEnv,
    tool,
)

ALL_CHOICES = ("action", "search", "answer", "finish")
Choice = Literal["action", "search", "answer", "finish"]


@dataclass
class Outcome:
    """What one choice produced: the observation text, raw reward components, whether it ended."""

    observation: str
    components: dict[str, float] = field(default_factory=dict)
    done: bool = False


class InteractEnv(ToolEnv):
    """Base env for gyms driven by `interact_with_env`.

    Class attributes: `gym_name`, `choices` (the choices this gym accepts besides `finish`),
    `default_weights` (component name -> weight when the recipe names none).
    """

    gym_name = "interact"
    choices: tuple[str, ...] = ("action", "answer")
    default_weights: dict[str, float] = {}

    def __init__(self, ctx: GymContext):
        self.ctx = ctx
        self.options = dict(ctx.options or {})
        self.rules = rule_set(self.options, self.gym_name)
        self.task: Task | None = None
        self.done = False
        self._turn_components: dict[str, float] = {}
        self._turn_errors: dict[str, int] = {}
        self._turn_done = False
        if ctx.user_kind == "llm" and ctx.llm is None and self.needs_llm():
            raise UsageError(
                f"gym {self.gym_name!r}: user.kind is 'llm' but no LLM client was configured"
            )

    # ----- hooks for subclasses -------------------------------------------------------------
    def needs_llm(self) -> bool:
        """Whether this gym calls `ctx.llm` in llm mode (most do)."""
        return True

    def setup(self, task: Task) -> None:
        """Read the task payload into episode state (called by `reset`)."""

    async def on_action(self, content: str) -> Outcome:
        raise NotImplementedError

    async def on_search(self, content: str) -> Outcome:
        raise NotImplementedError

    async def on_answer(self, content: str) -> Outcome:
        raise NotImplementedError

    # ----- the Env protocol -----------------------------------------------------------------
    async def reset(self, task: Task) -> ResetResult:
        self.task = task
        self.done = False
        self.setup(task)
        return ResetResult(messages=copy.deepcopy(task.prompt), tools=self.tool_schemas())

    async def close(self) -> None:
        self.done = True

    def tool_schemas(self) -> list[dict]:
        schemas = super().tool_schemas()
        allowed = [c for c in ALL_CHOICES if c in self.choices or c == "finish"]
        for schema in schemas:
            params = schema["function"]["parameters"]["properties"]
            if "choice" in params:
                params["choice"]["enum"] = allowed
        return schemas

    @tool
    async def interact_with_env(self, choice: Choice, content: str = "") -> str:
        """Interact with the environment.

        Args:
            choice: `action` to talk to the environment or user, `search` to query a tool or
                database, `answer` to submit an answer, `finish` to end the episode.
            content: The question, query or answer; empty for `finish`.
        """
        before = dict(self._turn_components)
        observation = await self._interact(choice, content)
        if self.rules != "upstream":
            return observation
        earned = self._weighted(
            {n: v - before.get(n, 0.0) for n, v in self._turn_components.items()}
        )
        return with_reward(observation, sum(earned.values()))

    async def _interact(self, choice: str, content: str) -> str:
        if self.done or self._turn_done:
            self._count_error("after_done")
            return "The episode has already ended; no further actions are accepted."
        if choice == "finish":
            self._turn_done = True
            return "Episode finished."
        if choice not in self.choices:
            self._count_error("bad_choice")
            allowed = ", ".join(f"`{c}`" for c in (*self.choices, "finish"))
            return f"Error: choice `{choice}` is not available in this game; use one of {allowed}."
        content = (content or "").strip()
        if not content:
            self._count_error("empty_content")
            return f"Error: `{choice}` needs a non-empty `content`."
        handler = {"action": self.on_action, "search": self.on_search, "answer": self.on_answer}[
            choice
        ]
        outcome = await handler(content)
        for name, value in outcome.components.items():
            self._turn_components[name] = self._turn_components.get(name, 0.0) + float(value)
        self._turn_done = self._turn_done or outcome.done
        return outcome.observation

    async def step(self, action: AgentAction) -> StepResult:
        if self.done:
            return StepResult(
                messages=[{"role": "user", "content": "The episode has already ended."}],
                done=True,
                info={"errors": {"after_done": 1}},
            )
        self._turn_components, self._turn_errors, self._turn_done = {}, {}, False
        if not action.tool_calls and self.rules == "upstream":
            self.done = True
            return no_tool_call_ending(action)
        if action.tool_calls or action.parse_errors:
            messages, errors = await self.call_tools(action)
        else:
            messages, errors = await self._plain_text_turn(action.text)
        for kind, n in self._turn_errors.items():
            errors[kind] = errors.get(kind, 0) + n
        self.done = self._turn_done
        components = self._weighted(self._turn_components)
        info = {"errors": errors} if errors else {}
        return StepResult(
            messages=messages,
            reward=float(sum(components.values())),
            components=components,
            done=self.done,
            info=info,
        )

    # ----- helpers --------------------------------------------------------------------------
    async def _plain_text_turn(self, text: str) -> tuple[list[dict], dict[str, int]]:
        text = (text or "").strip()
        if not text:
            msg = "Error: empty message. Call `interact_with_env` with a `choice` and `content`."
            return [{"role": "user", "content": msg}], {"empty_message": 1}
        observation = await self.interact_with_env("action", text)
        return [{"role": "user", "content": observation}], {}

    def _weighted(self, raw: dict[str, float]) -> dict[str, float]:
        weights = self.ctx.reward_weights or {}
        return {
            n: v * float(weights.get(n, self.default_weights.get(n, 1.0))) for n, v in raw.items()
        }

    def _count_error(self, kind: str) -> None:
        self._turn_errors[kind] = self._turn_errors.get(kind, 0) + 1
