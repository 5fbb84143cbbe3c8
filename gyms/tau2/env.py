"""The tau2 episode: tau2's conversation protocol around a `Tau2Environment`.

`reset(task)` builds the task's domain environment from `gym.options.data_dir`, applies the
task's initial state (a failing initialization action stops the run with one line naming the
task), and opens as tau2 does: the agent's greeting "Hi! How can I help you today?", then the
user's first message. Per agent turn: one tool call (the first of the turn; others are ignored
and counted) answered by a tool message, or one text message answered by the user, whose own
tool calls run on the user's side first. The user ends the conversation with ###STOP###,
###TRANSFER### or ###OUT-OF-SCOPE### (`user_stop`); the agent with ###STOP### in its text or,
in solo mode, the `done` tool (`agent_stop`); `max_errors` tool errors end it unscored
(`too_many_errors`), as do the runner's turn and token limits.

The last step carries tau2's reward and its components (reward.py), the termination reason,
the user model and, under the judge-free basis, `comparable: false`.
Deliberately not here: tool semantics (domain packages), scoring rules (reward.py).
"""

from __future__ import annotations

import json
import threading

from gyms.common.steps import closed_step
from gyms.tau2 import reward
from gyms.tau2.domain import AGENT, InitialStateError, Tau2Domain
from gyms.tau2.judge import judge_assertions
from gyms.tau2.options import check_options
from gyms.tau2.prompts import GREETING, system_prompt
from gyms.tau2.tasks import load_domain_checked
from gyms.tau2.users import STOP, LLMUser, ScriptedUser, is_stop
from mua.errors import UsageError
from mua.gym.api import AgentAction, GymContext, ResetResult, StepResult, Task
from mua.gym.tools import run_sync

DONE_TOOL = "done"
DONE_SCHEMA = {
    "type": "function",
    "function": {
        "name": DONE_TOOL,
        "description": "Call this when the ticket is solved; it ends the session.",
        "parameters": {"properties": {}, "title": "parameters", "type": "object"},
    },
}

_DOMAINS: dict[tuple[str, str], Tau2Domain] = {}
_DOMAINS_LOCK = threading.Lock()
_JUDGES: dict[str, object] = {}


def domain_for(name: str, data_dir) -> Tau2Domain:
    """The domain, checked and loaded once per process and data folder."""
    key = (name, str(data_dir))
    with _DOMAINS_LOCK:
        if key not in _DOMAINS:
            _DOMAINS[key] = load_domain_checked(data_dir, name)
        return _DOMAINS[key]


class Tau2Env:
    """One tau2 conversation (domain from the task row)."""

    def __init__(self, ctx: GymContext):
        self.ctx = ctx
        if ctx.user_kind == "seat" and (ctx.options or {}).get("profile") == "leaderboard":
            raise UsageError(
                "tau2: the user seat needs gym.options.profile: mua (the leaderboard user calls "
                "its tools natively, which the seat does not); remove profile or seat: user"
            )
        self.options = check_options(ctx.options)
        if ctx.user_kind == "llm" and ctx.llm is None:
            raise UsageError(
                "tau2: user.kind is llm but no LLM client was given; set user.base_url/model "
                "or use user.kind: scripted"
            )
        self.task: Task | None = None
        self.done = False

    def _judge(self):
        judge = self.options.judge
        if judge == "user":
            if self.ctx.llm is None:
                raise UsageError("tau2: gym.options.judge is `user` but user.kind is not llm")
            return self.ctx.llm
        if isinstance(judge, dict):
            key = json.dumps(judge, sort_keys=True)
            if key not in _JUDGES:
                from mua.config.users import LLMUserConfig
                from mua.llm.llm_client import LLMClient

                _JUDGES[key] = LLMClient(
                    LLMUserConfig(**{"kind": "llm", **judge}),
                    label="tau2 judge (gym.options.judge)",
                    setting="gym.options.judge.base_url",
                )
            return _JUDGES[key]
        return None

    async def reset(self, task: Task) -> ResetResult:
        if self.options.data_dir is None:
            raise UsageError(
                "tau2: set gym.options.data_dir to the tau2-bench data folder given to mua prep"
            )
        name = task.payload["domain"]
        self.task, self.done = task, False
        self.tau2 = task.payload["task"]
        self.domain = domain_for(name, self.options.data_dir)
        criteria = self.tau2.get("evaluation_criteria") or {}
        self.skip = ()
        if "NL_ASSERTION" in (criteria.get("reward_basis") or []) and criteria.get("nl_assertions"):
            if self.options.basis == "no_nl" or self.ctx.user_kind == "seat":
                self.skip = ("NL_ASSERTION",)  # in the user seat the agent's score is not trained
            elif self._judge() is None:
                raise UsageError(
                    f"tau2: task {task.task_id} is scored with NL assertions; set "
                    "gym.options.judge (an endpoint, or `user`) or gym.options.basis: no_nl "
                    "(not comparable with tau2's published numbers)"
                )
        solo = self.options.solo
        self.env = self.domain.new_environment(solo=solo)
        try:
            self.env.apply_initial_state(self.tau2.get("initial_state"))
        except InitialStateError as err:
            raise UsageError(f"tau2: task {task.task_id}: {err}") from err
        self.calls, self.texts, self.errors = [], [], 0
        self.transcript: list[dict] = []
        tools = self.env.agent_schemas() + ([DONE_SCHEMA] if solo else [])
        policy = system_prompt(self.env.policy, solo, self.tau2.get("ticket"))
        messages = [{"role": "system", "content": policy}]
        greeting = {"role": "assistant", "content": GREETING}
        self.board = None
        if self.options.profile == "leaderboard":
            from gyms.tau2.leaderboard.episode import LeaderboardEpisode

            trial = self.ctx.sample_index
            self.board = LeaderboardEpisode(self.options, self.env, name, self.tau2, trial)
            tools, messages = self.board.agent["tools"], self.board.agent["messages"][:1]
            greeting = self.board.greeting
        request = self.board.request if self.board is not None else {}
        if solo:
            self.user = None
            return ResetResult(messages=messages, tools=tools, request=request)
        persona = self.options.persona
        scenario = self.tau2.get("user_scenario") or {}
        if self.ctx.user_kind == "llm" and self.board is not None:
            self.user = self.board.user(self.ctx.llm)
            opening = await self.user.reply(greeting["content"])
            first, calls = opening.text, opening.calls
        elif self.ctx.user_kind in ("llm", "seat"):  # the seat: the policy (mua.users)
            self.user = LLMUser(self.ctx.llm, self.env, self.domain.data_dir, scenario, persona)
            opening = await self.user.reply(GREETING)
            first, calls = opening.text, opening.calls
        else:
            self.user = scripted_user(self.env, self.tau2, self.task.payload["domain"], persona)
            first, calls = self.user.opening(), []
        self.calls.extend(calls)
        self.transcript += [
            {"role": "assistant", "content": GREETING},
            {"role": "user", "content": first},
        ]
        messages += [greeting, {"role": "user", "content": first}]
        if self.board is not None:
            self.board.step(1 + 2 * len(calls))
        return ResetResult(messages=messages, tools=tools, request=request)

    async def step(self, action: AgentAction) -> StepResult:
        if (closed := closed_step(self.task, self.done)) is not None:
            return closed
        if action.tool_calls or action.parse_errors:
            return await self._tool_turn(action)
        text = action.text or ""
        self.texts.append(text)
        self.transcript.append({"role": "assistant", "content": text})
        if STOP in text:
            return await self._finish([], "agent_stop")
        if self.user is None:
            note = "Error: in solo mode there is no user to talk to; make a tool call."
            return StepResult(messages=[{"role": "user", "content": note}])
        if self.board is not None and self.board.step(1):
            return await self._finish([], "max_steps")
        turn = await self.user.reply(text)
        self.calls.extend(turn.calls)
        self.transcript.append({"role": "user", "content": turn.text})
        messages = [{"role": "user", "content": turn.text}]
        if is_stop(turn.text):
            return await self._finish(messages, "user_stop")
        if self.board is not None and self.board.step(1 + 2 * len(turn.calls)):
            return await self._finish(messages, "max_steps")
        return StepResult(messages=messages)

    async def _tool_turn(self, action: AgentAction) -> StepResult:
        """The agent's tool calls run, as tau2's orchestrator runs them: under `profile:
        leaderboard` every call of the message (results in order, one step for the message and
        one for its results); otherwise the first, the rest counted as `ignored_tool_calls`."""
        errors: dict[str, int] = {}
        every = self.options.profile == "leaderboard"
        calls = action.tool_calls if every else action.tool_calls[:1]
        ignored = len(action.tool_calls) - len(calls) + len(action.parse_errors)
        ignored -= 0 if calls else 1
        if ignored:
            errors["ignored_tool_calls"] = ignored
        results = []
        for call in calls:
            if self.options.solo and call.name == DONE_TOOL:
                return await self._finish([], "agent_stop")
            arguments = call.arguments if isinstance(call.arguments, dict) else {}
            # off the event loop: the runner's deadline on env.step holds while a tool runs
            content, error = await run_sync(self.env.tool_call, AGENT, call.name, arguments)
            self.calls.append({"requestor": AGENT, "name": call.name, "arguments": arguments})
            results.append((call.name, content, error))
        if calls:
            self.transcript.append({"role": "assistant", "content": None})
        else:
            results.append(("parser", f"Error: {action.parse_errors[0]}", True))
            errors["parse_error"] = 1
        messages = []
        for name, content, error in results:
            self.transcript.append({"role": "tool", "content": content})
            messages.append({"role": "tool", "name": name, "content": content})
            if error:
                self.errors += 1
                errors["tool_error"] = errors.get("tool_error", 0) + 1
        if self.errors >= self.options.max_errors and any(error for *_, error in results):
            return await self._finish(messages, "too_many_errors", {"errors": errors})
        if self.board is not None and self.board.step(2):
            return await self._finish(messages, "max_steps", {"errors": errors})
        return StepResult(messages=messages, info={"errors": errors} if errors else {})

    async def _finish(self, messages: list[dict], termination: str, info: dict | None = None):
        self.done = True
        criteria = self.tau2.get("evaluation_criteria") or {}
        nl = None
        if (
            termination in reward.ENDED
            and "NL_ASSERTION" in (criteria.get("reward_basis") or [])
            and criteria.get("nl_assertions")
            and not self.skip
        ):
            judge = self.board.judge if self.board is not None else judge_assertions
            nl = await judge(self._judge(), self.transcript, criteria["nl_assertions"])
        value, components, details = reward.score(
            self.domain,
            self.tau2,
            self.calls,
            self.texts,
            termination,
            nl_results=nl,
            solo=self.options.solo,
            skip=self.skip,
        )
        info = {
            **(info or {}),
            "termination": termination,
            "reward_info": details,
            "domain": self.task.payload["domain"],
            "comparable": not self.skip,
            "user_model": self._user_model(),
            "profile": self.options.profile,
        }
        if self.options.checkout is not None:
            info["tau2_checkout"] = self.options.checkout.describe()
        return StepResult(
            messages=messages, reward=value, components=components, done=True, info=info
        )

    def _user_model(self) -> str:
        if self.user is None:
            return "none (solo)"
        if not isinstance(self.user, LLMUser):
            return "scripted"
        endpoint = getattr(self.ctx.llm, "endpoint", None)
        return getattr(endpoint, "model", None) or "llm"

    async def close(self) -> None:
        self.env = None
        self.user = None


def scripted_user(env, task: dict, domain: str, persona: str):
    """The offline customer of `domain`: telecom's works the phone it holds; the others play the
    task's instructions and its gold user actions."""
    if domain.startswith("telecom"):
        from gyms.tau2.telecom.scripted_user import TelecomScriptedUser

        return TelecomScriptedUser(env, task, persona=None if persona == "task" else persona)
    return ScriptedUser(env, task, persona=persona)
