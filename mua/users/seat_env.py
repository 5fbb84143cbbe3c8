"""`SeatEnv`: the gym's own episode, played by a fixed agent, with the policy as its user.

`reset` makes the gym's env with `ctx.user_kind = "seat"` and a `SeatClient` as `ctx.llm` and
runs the inner episode as a task; each user request the inner env makes becomes the policy's
observation and its next turn the reply (docs/user_seat.md, "How an episode runs"). The reward,
`fidelity` (blended with a judge's score when the entry names one), is paid when the inner episode
ends. A fixed agent that cannot answer ends it as `user_failure`, another inner failure as
`env_error`; a `MuaError` stops the run. Not here: parsing model output.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from typing import Any

from mua.errors import MuaError
from mua.families.common import split_think
from mua.gym.api import AgentAction, ResetResult, StepResult, Task, UserFailure
from mua.users.fidelity import UserTurn, fidelity


def agent_text(message: dict) -> str:
    """What the user sees of an agent message: its text without `<think>` blocks, then each
    tool call as `[choice] content` (an `interact_with_env` call) or `name {json arguments}`."""
    parts = [split_think(str(message.get("content") or ""))[1].strip()]
    for call in message.get("tool_calls") or []:
        fn = call.get("function") or {}
        args = fn.get("arguments")
        if isinstance(args, dict) and "choice" in args:
            parts.append(f"[{args['choice']}] {args.get('content', '')}".rstrip())
        else:
            shown = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)
            parts.append(f"{fn.get('name', 'tool')} {shown}")
    return "\n".join(p for p in parts if p)


class SeatClient:
    """The `JudgeClient` the inner env's user talks through: each request goes to the seat."""

    def __init__(self, env: SeatEnv):
        self.env = env

    async def complete(self, messages: list[dict]) -> str:
        return await self.env.ask_user(messages)

    async def complete_json(self, messages: list[dict], validate=None) -> Any:
        seat = self.env.seat
        reply = await self.env.ask_user(messages)
        if seat.as_json is None:
            raise UserFailure("this gym's user seat cannot answer a JSON request")
        try:
            value = seat.as_json(reply, messages)
            return validate(value) if validate is not None else value
        except ValueError:  # the reply's form is wrong: `UserSeat.check` finds the turn
            fallback = seat.json_fallback
            return validate(fallback) if validate is not None else fallback


class SeatEnv:
    """One episode of the user seat (see the module docstring)."""

    def __init__(self, spec, ctx, agent, max_agent_turns: int, judge=None):
        self.spec = spec  # the gym's own GymSpec
        self.seat = spec.user_seat
        self.ctx = ctx
        self.agent = agent  # a MessagePolicy
        self.max_agent_turns = max_agent_turns
        self.judge = judge  # (LLM client, weight) of the entry's fidelity_judge, or None
        self.turns: list[UserTurn] = []
        self.success = False
        self.scored = False
        self._events: asyncio.Queue = asyncio.Queue()
        self._pending: asyncio.Future | None = None
        self._play_task: asyncio.Task | None = None
        self._inner = None
        self._last_agent = ""
        self._shown = ""  # the policy's observation for the pending request
        self._prompt: str | None = None  # the user chat's system message (`sees_request`)
        self.task: Task | None = None

    # ----- the inner episode ------------------------------------------------------------------
    async def ask_user(self, request: list[dict]) -> str:
        """Called by the inner env (through `SeatClient`) with what its user would send its
        model: wait for the policy's reply."""
        self._shown = self._last_agent
        if self.seat.sees_request and request:
            if request[0].get("role") == "system" and self._prompt is None:
                self._prompt = str(request[0].get("content") or "")
            self._shown = str(request[-1].get("content") or "")
        self._pending = asyncio.get_running_loop().create_future()
        await self._events.put(("ask", None))
        return await self._pending

    async def _play(self) -> None:
        try:
            reset = await self._inner.reset(self.task)
            messages, tools = list(reset.messages), list(reset.tools or [])
            for _ in range(self.max_agent_turns):
                message = await self.agent.act(messages, self.task, tools)
                action = self.agent.to_action(message)
                self._last_agent = agent_text(message)
                messages.append({k: v for k, v in message.items() if k != "parse_errors"})
                result = await self._inner.step(action)
                messages += list(result.messages)
                if result.reward > 0:
                    self.success = True
                if result.done:
                    break
            await self._events.put(("end", None))
        except asyncio.CancelledError:
            raise
        except BaseException as e:  # delivered to the runner by `_next`
            await self._events.put(("error", e))

    async def _next(self) -> str:
        """Wait for the inner episode's next user request ("ask") or its end ("end")."""
        kind, error = await self._events.get()
        if kind != "error":
            return kind
        if isinstance(error, (MuaError, UserFailure)):
            raise error
        raise RuntimeError(f"the inner {self.spec.name} episode failed: {error}") from error

    # ----- the Env protocol -------------------------------------------------------------------
    async def reset(self, task: Task) -> ResetResult:
        self.task = task
        inner_ctx = replace(self.ctx, user_kind="seat", llm=SeatClient(self))
        self._inner = self.spec.make_env(inner_ctx)
        self._play_task = asyncio.ensure_future(self._play())
        shown = self._shown if await self._next() == "ask" else self._last_agent
        return ResetResult(
            messages=[
                {"role": "system", "content": self.user_prompt()},
                {"role": "user", "content": shown},
            ]
        )

    def user_prompt(self) -> str:
        """The policy's system message: the user chat's own, or the seat's prompt of the task."""
        return self._prompt if self._prompt is not None else self.seat.user_prompt(self.task)

    async def step(self, action: AgentAction) -> StepResult:
        reply = (action.raw or action.text or "").strip()
        if self._pending is None or self._pending.done():
            return await self._score(done=True)  # the agent finished before asking anything
        self.turns.append(UserTurn(agent=self._shown, reply=reply))
        self._pending.set_result(reply)
        if await self._next() == "end":
            return await self._score(done=True)
        return StepResult(messages=[{"role": "user", "content": self._shown}])

    async def on_truncate(self, reason: str) -> StepResult | None:
        return None if self.scored else await self._score(done=False)

    async def _score(self, done: bool) -> StepResult:
        """The checks' fidelity, blended with the judge's rubric score when there is a judge:
        (1 - w) × checks + w × rubric, components `fidelity`, `judge` and `judge_<criterion>`."""
        self.scored = True
        value, counts = fidelity(self.turns, self.task, self.spec.name, self.seat, self.success)
        info = {"user_findings": counts} if counts else {}
        components = {"fidelity": value}
        reward = value
        if self.judge is not None:
            from mua.users.seat_judge import rate

            client, weight = self.judge
            prompt = self.user_prompt()
            score, verdict = await rate(client, prompt, self.turns, ended=done)
            components["judge"] = score
            components.update({f"judge_{k}": v for k, v in verdict.items()})
            reward = (1.0 - weight) * value + weight * score
        return StepResult(reward=reward, components=components, done=done, info=info)

    async def close(self) -> None:
        if self._play_task is not None and not self._play_task.done():
            self._play_task.cancel()
            await asyncio.gather(self._play_task, return_exceptions=True)
        if self._inner is not None:
            await self._inner.close()
