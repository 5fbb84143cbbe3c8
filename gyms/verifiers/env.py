"""One episode of the verifiers gym: the environment's own episode, its model turns from mua.

`reset` starts the environment's `run_episode` on the task (the payload's wire task data) in
the bridge and returns the messages of its first request to the model (and the tools it offers);
each `step` is the model's reply to that request (its text, its tool calls) and returns the
messages new to the model at its next request, or, when the episode ends, the task's rewards on
the model's trace (components named as the environment names them). A failure of the
environment or the bridge is a `VerifiersFault` (env_error). Not here: the bridge process
(`gyms.verifiers.bridge`, in the side venv).
"""

from __future__ import annotations

import itertools
import json
import os
from pathlib import Path

from gyms.common.side_bridge import BridgePool, SideBridge, check_python
from gyms.verifiers.config import read_options
from mua.errors import UsageError
from mua.gym import AgentAction, GymContext, ResetResult, StepResult, Task

_SESSIONS = itertools.count()
ROLES = ("system", "user", "tool")  # new messages of a step; an opening may hold assistant ones


class VerifiersFault(Exception):
    """The verifiers environment or its bridge failed: the trajectory's env_error."""


class VerifiersBridge(SideBridge):
    """`SIDE_PYTHON gyms/verifiers/bridge.py ENV_ID ENV_ARGS_JSON`."""

    script = Path(__file__).with_name("bridge.py")
    fault = VerifiersFault
    label = "the verifiers bridge"

    def __init__(self, python: str, env: str, env_args: str):
        super().__init__(python, [env, env_args])
        self.env = env

    def describe(self, request: dict) -> str:
        return f"verifiers {request['op']} of {self.env}"


POOL = BridgePool(VerifiersBridge, "mua-verifiers")


async def ask(opts, **request) -> dict:
    key = (opts.python, opts.env, json.dumps(opts.env_args, sort_keys=True))
    return await POOL.get().request(key, opts.timeout_s, opts.start_timeout_s, **request)


def checked_messages(answer: dict, roles: tuple[str, ...] = ROLES) -> list[dict]:
    messages = answer.get("messages")
    ok = isinstance(messages, list) and all(
        isinstance(m, dict) and m.get("role") in roles and isinstance(m.get("content"), str)
        for m in messages
    )
    if not ok:
        raise VerifiersFault(
            f"the environment's messages are not {{role, content}}: {messages!r}"[:500]
        )
    return messages


class VerifiersEnv:
    def __init__(self, ctx: GymContext):
        self.ctx = ctx
        self.opts = read_options(ctx.options)
        check_python(
            self.opts.python, "verifiers and the environment package (make verifiers-side)"
        )
        self.session = f"{os.getpid()}-{next(_SESSIONS)}"
        self.opened = False

    async def reset(self, task: Task) -> ResetResult:
        if task.payload.get("env") != self.opts.env or "data" not in task.payload:
            raise UsageError(
                f"task {task.task_id} is not a task of the verifiers env {self.opts.env!r} "
                f"(its payload names {task.payload.get('env')!r}); prep it with --option "
                f"env={self.opts.env}"
            )
        self.opened = True
        answer = await ask(self.opts, op="reset", session=self.session, data=task.payload["data"])
        tools = answer.get("tools") or []
        if not isinstance(tools, list):
            raise VerifiersFault(f"the environment's tools are not a list: {tools!r}"[:500])
        return ResetResult(messages=checked_messages(answer, (*ROLES, "assistant")), tools=tools)

    async def step(self, action: AgentAction) -> StepResult:
        calls = [
            {"id": c.id or f"call_{i}", "name": c.name, "arguments": c.arguments}
            for i, c in enumerate(action.tool_calls)
        ]
        reply = {"text": action.text, "tool_calls": calls}
        answer = await ask(self.opts, op="step", session=self.session, reply=reply)
        messages = checked_messages(answer)
        if not answer.get("done"):
            return StepResult(messages=messages)
        components = answer.get("components")
        if not isinstance(components, dict) or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) for v in components.values()
        ):
            raise VerifiersFault(f"the environment's rewards are not numbers: {components!r}")
        reward = float(sum(components.values()))
        return StepResult(messages=messages, reward=reward, components=components, done=True)

    async def close(self) -> None:
        if self.opened:
            try:
                await ask(self.opts, op="close", session=self.session)
            except VerifiersFault:
                pass
