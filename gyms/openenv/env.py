"""One episode of the openenv gym: reset and step an OpenEnv environment over its client.

`reset` resets a session of the server with the task payload (or its `reset_args`) and shows the
reset observation as a user message after the task's prompt. Each turn is one action: the
arguments of its first tool call, else `{action_field: text}`; the observation (its
`observation_field`, else its JSON without metadata) comes back as the user message, with the
step's reward and done. A failure of the server or client is an `OpenEnvFault` (env_error).
"""

from __future__ import annotations

import itertools
import json
import os

from gyms.common.side_bridge import check_python
from gyms.openenv.client import OpenEnvFault, bridges
from gyms.openenv.config import read_options
from mua.gym import AgentAction, GymContext, ResetResult, StepResult, Task

_SESSIONS = itertools.count()


class OpenEnvEnv:
    def __init__(self, ctx: GymContext):
        self.ctx = ctx
        self.opts = read_options(ctx.options)
        check_python(self.opts.python, "openenv (make openenv-side)")
        self.session = f"{os.getpid()}-{next(_SESSIONS)}"
        self.opened = False

    async def _ask(self, **request) -> dict:
        o = self.opts
        return await bridges().request(
            (o.python, o.url), o.timeout_s, o.start_timeout_s, session=self.session, **request
        )

    def _shown(self, answer: dict) -> str:
        obs = answer.get("observation")
        if not isinstance(obs, dict):
            raise OpenEnvFault(f"OpenEnv observation is not an object: {str(obs)[:200]}")
        field = self.opts.observation_field
        if field is not None:
            if field not in obs:
                raise OpenEnvFault(f"OpenEnv observation has no field {field!r}: {sorted(obs)}")
            value = obs[field]
            text = value if isinstance(value, str) else json.dumps(value)
        else:
            text = json.dumps({k: v for k, v in obs.items() if k != "metadata"})
        if len(text) > self.opts.max_observation_chars:
            raise OpenEnvFault(
                f"OpenEnv observation of {len(text)} characters, over max_observation_chars="
                f"{self.opts.max_observation_chars}"
            )
        return text

    async def reset(self, task: Task) -> ResetResult:
        keys = self.opts.reset_args
        kwargs = task.payload if keys is None else {k: task.payload[k] for k in keys}
        self.opened = True
        answer = await self._ask(op="reset", kwargs=kwargs)
        messages = [dict(m) for m in task.prompt]
        text = self._shown(answer)
        if text:
            messages.append({"role": "user", "content": text})
        return ResetResult(messages=messages)

    async def step(self, action: AgentAction) -> StepResult:
        if action.tool_calls:
            args = action.tool_calls[0].arguments
            act = args if isinstance(args, dict) else {self.opts.action_field: str(args)}
        else:
            act = {self.opts.action_field: action.text}
        answer = await self._ask(op="step", action=act)
        reward = answer.get("reward") or 0.0
        if isinstance(reward, bool) or not isinstance(reward, (int, float)):
            raise OpenEnvFault(f"OpenEnv reward is not a number: {reward!r}")
        return StepResult(
            messages=[{"role": "user", "content": self._shown(answer)}],
            reward=float(reward),
            components={"reward": float(reward)},
            done=bool(answer.get("done")),
        )

    async def close(self) -> None:
        if self.opened:
            try:
                await self._ask(op="close")
            except OpenEnvFault:
                pass
