"""The tau episode: a customer, the domain policy as system prompt, and the domain's tools.

`reset(task)` gives a fresh copy-on-write database, the policy as the system message, the
customer's opening message and the domain's tool schemas. In `step`, tool calls (and unreadable
tool-call markup) run as tools and answer with tool messages; a turn without tool calls is text
to the customer, who answers. The episode ends when the customer's reply contains `###STOP###`
or a `transfer_to_human_agents` call succeeds; that last step carries the reward and its
components `db_match` and `outputs` (reward.py). Steps after the end change nothing.

Rules (`gym.options.rules`, options.py): under `upstream` (tau-bench, MUA-RL) only the first tool
call of a turn runs (the others are counted under `errors.ignored_tool_calls`), and an episode
the runner cuts short (`on_truncate`: turn or token budget) is scored on the database it left.
Under `mua` every call of a turn runs, in order, and a cut-short episode earns nothing.

Deliberately not here: turn and token limits (the runner's), parsing model text into tool calls.
"""

from __future__ import annotations

from gyms.common.steps import closed_step
from gyms.tau import domains, reward
from gyms.tau.common_tools import TRANSFER_OK, TRANSFER_TOOL, tool_methods
from gyms.tau.options import check_options
from gyms.tau.users import STOP, LLMCustomer, ScriptedCustomer
from mua.errors import UsageError
from mua.gym.api import AgentAction, GymContext, ResetResult, StepResult, Task
from mua.gym.tools import ToolEnv


class TauEnv(ToolEnv):
    """One tau episode (retail or airline, chosen by the task's payload)."""

    def __init__(self, ctx: GymContext):
        if ctx.user_kind == "llm" and ctx.llm is None:
            raise UsageError(
                "tau: user.kind is llm but no LLM client was given; set user.base_url/model or use user.kind: scripted"
            )
        self.ctx = ctx
        self.options = check_options(ctx.options)
        self.task: Task | None = None
        self.toolset = None
        self.customer = None
        self.said: list[str] = []
        self.done = False
        self.tool_calls_made = 0

    def tool_methods(self) -> dict:
        return tool_methods(self.toolset) if self.toolset is not None else {}

    @property
    def db(self):
        return self.toolset.db

    async def reset(self, task: Task) -> ResetResult:
        payload = task.payload
        toolset_cls = domains.toolset_class(payload)
        base = domains.load_base(payload, self.ctx.options)
        self.task = task
        self.toolset = toolset_cls(base.view())
        self.said, self.done, self.tool_calls_made = [], False, 0
        if self.ctx.user_kind in ("llm", "seat"):  # the seat: the policy (mua.users)
            self.customer = LLMCustomer(
                self.ctx.llm, payload.get("instruction", ""), rules=self.options.rules
            )
        else:
            self.customer = ScriptedCustomer(
                payload, base.tables["users"].get(payload.get("user_id", ""))
            )
        opening = await self.customer.start()
        messages = [
            {"role": "system", "content": domains.policy(payload, self.ctx.options)},
            {"role": "user", "content": opening},
        ]
        return ResetResult(messages=messages, tools=self.tool_schemas())

    async def step(self, action: AgentAction) -> StepResult:
        if (closed := closed_step(self.task, self.done)) is not None:
            return closed
        if action.tool_calls or action.parse_errors:
            return await self._run_tools(action)
        text = action.text or ""
        self.said.append(text)
        answer = await self.customer.reply(text)
        messages = [{"role": "user", "content": answer}]
        if STOP in answer:
            return self._finish(messages, "user_stop")
        return StepResult(messages=messages)

    async def _run_tools(self, action: AgentAction) -> StepResult:
        messages, errors = [], {}
        calls, parse_errors = action.tool_calls, action.parse_errors
        if self.options.upstream:
            # One call per turn, as tau-bench and MUA-RL execute; a readable call goes first.
            ignored = len(calls) + len(parse_errors) - 1
            calls, parse_errors = (calls[:1], []) if calls else ([], parse_errors[:1])
            if ignored > 0:
                errors["ignored_tool_calls"] = ignored
        for err in parse_errors:
            messages.append(
                {
                    "role": "tool",
                    "name": "parser",
                    "content": f"Error: could not read your tool call: {err}",
                }
            )
            errors["parse_error"] = errors.get("parse_error", 0) + 1
        for call in calls:
            msg, kind = await self.call_tool(call)
            messages.append(msg)
            self.tool_calls_made += 1
            if kind:
                errors[kind] = errors.get(kind, 0) + 1
            elif call.name == TRANSFER_TOOL and msg["content"] == TRANSFER_OK:
                info = {"errors": errors} if errors else {}
                return self._finish(messages, "transfer", info)
        return StepResult(messages=messages, info={"errors": errors} if errors else {})

    async def on_truncate(self, reason: str) -> StepResult | None:
        """Called by the runner when it ends an episode this env had not ended (`max_turns`,
        `length`). Upstream rules score the database as it stands; mua rules give nothing."""
        if self.task is None or self.done or not self.options.upstream:
            return None
        return self._finish([], reason)

    def _finish(
        self, messages: list[dict], termination: str, info: dict | None = None
    ) -> StepResult:
        self.done = True
        value, components, details = reward.score(
            self.db, type(self.toolset), self.task.payload, self.said
        )
        info = {**(info or {}), "termination": termination, "reward_info": details}
        return StepResult(
            messages=messages, reward=value, components=components, done=True, info=info
        )

    def export_db(self) -> dict:
        """The episode's database in the public files' layout."""
        return self.db.export()

    async def close(self) -> None:
        self.toolset = None
        self.customer = None
