"""Data types and protocols of the gym API.

Messages are OpenAI-style dicts (`{"role": ..., "content": ...}`, assistant messages may carry
`tool_calls`, tool messages a `name`). The runner parses the policy's text into an
`AgentAction`; an `Env` answers with a `StepResult`. Nothing here knows about tokens or torch.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from mua.errors import UserFailure  # noqa: F401 - part of the gym API, defined with the other errors


@dataclass
class Task:
    """One task row (see docs/gyms.md, "The canonical task row"); `payload` is the parsed JSON."""

    task_id: str
    gym: str
    split: str
    prompt: list[dict]
    payload: dict
    source: str = "builtin"
    version: str = "1"

    def to_row(self) -> dict:
        return {
            "task_id": self.task_id,
            "gym": self.gym,
            "split": self.split,
            "prompt": json.dumps(self.prompt, ensure_ascii=False),
            "payload": json.dumps(self.payload, ensure_ascii=False, sort_keys=True),
            "source": self.source,
            "version": self.version,
        }

    @classmethod
    def from_row(cls, row: dict) -> Task:
        prompt = row["prompt"]
        payload = row["payload"]
        return cls(
            task_id=str(row["task_id"]),
            gym=row["gym"],
            split=row.get("split", ""),
            prompt=json.loads(prompt) if isinstance(prompt, str) else list(prompt),
            payload=json.loads(payload) if isinstance(payload, str) else dict(payload),
            source=row.get("source", "builtin"),
            version=str(row.get("version", "1")),
        )


@dataclass
class ToolCall:
    name: str
    arguments: dict
    id: str = ""


@dataclass
class AgentAction:
    """What the policy did in one turn, as parsed by the runner.

    `text` is the content outside tool-call markup (goes to the user when there are no tool
    calls); `parse_errors` lists markup that could not be read (the env turns them into an
    observation and the runner counts them).
    """

    text: str
    tool_calls: list[ToolCall] = field(default_factory=list)
    parse_errors: list[str] = field(default_factory=list)
    raw: str = ""

    def as_message(self) -> dict:
        msg: dict[str, Any] = {"role": "assistant", "content": self.text}
        if self.tool_calls:
            msg["tool_calls"] = [
                {"type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                for c in self.tool_calls
            ]
        return msg


@dataclass
class ResetResult:
    """The opening of an episode: messages (system + first user turn) and tool schemas.

    `request`: fields a message-level agent behind an API adds to each of the episode's
    requests besides messages and tools (tau2's leaderboard: its trial's `seed`, `tool_choice`);
    token-level policies ignore it."""

    messages: list[dict]
    tools: list[dict] = field(default_factory=list)
    request: dict = field(default_factory=dict)


@dataclass
class StepResult:
    """The environment's answer to one assistant turn.

    `messages` are new user/tool/env messages, appended to the conversation (role `user`,
    `tool`, or `env` for injected interventions). `reward` is this turn's reward; `components`
    its named parts (already weighted). `info` may carry `error_kind` (e.g. "unknown_tool",
    "bad_arguments", "tool_exception", "parse_error") for metrics. `cut_at`, when set, says the
    env read the assistant turn only up to that many characters of `AgentAction.raw`: the runner
    drops what the policy wrote after it (neither trained on nor kept in the context). An env
    message with `"style": "raw"` is appended as raw continuation text whatever
    `rollout.intervention_style` says.
    """

    messages: list[dict] = field(default_factory=list)
    reward: float = 0.0
    components: dict[str, float] = field(default_factory=dict)
    done: bool = False
    info: dict = field(default_factory=dict)
    cut_at: int | None = None


@runtime_checkable
class Env(Protocol):
    """One episode of a gym. Async; one instance per trajectory; process-local.

    Optional: `async def on_truncate(reason) -> StepResult | None`, called once when the runner
    ends an episode the env had not ended (`max_turns`, `length`); the reward and components of
    a returned StepResult are added to the last turn's (tau's upstream rules score the database
    an episode left, whatever ended it). A `mua.errors.UsageError` raised by an env is a
    configuration problem (a missing data folder, a bad option) and stops the run.
    """

    async def reset(self, task: Task) -> ResetResult: ...

    async def step(self, action: AgentAction) -> StepResult: ...

    async def close(self) -> None: ...


class JudgeClient(Protocol):
    """What an LLM-backed user or judge gets: chat completions, optionally validated JSON.

    Implementations retry with backoff and raise `UserFailure` when retries are spent.
    """

    async def complete(self, messages: list[dict]) -> str: ...

    async def complete_json(
        self, messages: list[dict], validate: Callable[[Any], Any] | None = None
    ) -> Any: ...


@dataclass
class GymContext:
    """What a gym's env factory receives.

    `user_kind` is "scripted" or "llm"; `llm` is set when user_kind == "llm". In the user seat
    (`mua.users`) it is "seat": the user's requests go through `llm` to the trained policy and
    judges stay scripted. `options` are the
    recipe's `gym.options`; `reward_weights` the recipe's `gym.reward_weights`.
    `sample_index`: which of its task's samples the env's trajectory is (the runner sets it
    per trajectory; tau2 seeds each trial by it).
    """

    options: dict = field(default_factory=dict)
    reward_weights: dict[str, float] = field(default_factory=dict)
    user_kind: str = "scripted"
    llm: JudgeClient | None = None
    seed: int = 0
    sample_index: int = 0


# An expert acts like a policy at message level: given the conversation so far and the task,
# it returns the next assistant message (content and optional tool_calls).
ExpertPolicy = Callable[[list[dict], Task], Awaitable[dict]]


@dataclass
class GymSpec:
    """How a gym plugs into mua (each gym package exposes one as `GYM`).

    build_tasks(source, seed, options) -> dict[split, list[Task]]: the built-in dataset when
    `source` is None, else the public data at that path (raising `mua.errors.UsageError` with a
    precise message on a bad file).
    make_env(ctx) -> Env: a fresh environment for one trajectory.
    expert(ctx) -> ExpertPolicy: a scripted policy that solves most built-in tasks.
    random_action(rng) -> str: a random assistant output (for contract tests/baselines).
    trivial_baseline: name of a trivial policy's score worth reporting (e.g. tau's do-nothing).
    budgets: the rollout budgets (`max_turns`, `max_total_tokens`, `max_new_tokens_per_turn`) its
    tasks need, used wherever a recipe leaves them unset (`mua.gym.budgets`): set so the
    scripted expert finishes every built-in task.
    needs_data: True for a gym without a built-in dataset (its tasks come only from public data
    through `mua prep --source`); `mua eval --gym all` without task files leaves it out.
    endpoints(options) -> [(what, LLMUserConfig)]: LLM endpoints the gym itself calls with these
    options besides the simulated user (e.g. a judge); each is checked with one request before a
    run starts, like the user (`mua.run.preflight`).
    eval_notes(out_dir) -> [line]: lines `mua eval` prints under its summary table for this gym
    (e.g. whether the numbers are comparable with a published benchmark's).
    score_conversation(messages, task, ctx) -> float: the reward of a conversation an agent
    program held through the training gateway (a program gym's `reward: gym`); None: the gym
    cannot score one.
    user_seat: how the trained policy plays this gym's user (`seat: user`, a
    `mua.gym.user_seat.UserSeat`); None: the gym's user cannot take the seat.
    """

    name: str
    description: str
    make_env: Callable[[GymContext], Env]
    build_tasks: Callable[..., dict[str, list[Task]]]
    expert: Callable[[GymContext], ExpertPolicy] | None = None
    reward_components: dict[str, float] = field(default_factory=dict)
    tool_format: str = "hermes"
    trivial_baseline: Callable[[list[Task]], float] | None = None
    random_action: Callable[[Any], str] | None = None
    budgets: dict[str, int] = field(default_factory=dict)
    needs_data: bool = False
    endpoints: Callable[[dict], list[tuple[str, Any]]] | None = None
    eval_notes: Callable[[Any], list[str]] | None = None
    score_conversation: Callable[[list[dict], Task, GymContext], float] | None = None
    user_seat: Any = None
