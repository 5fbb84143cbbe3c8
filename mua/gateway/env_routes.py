"""A program gym's environment over HTTP: the gym's simulated user and tools, offered to the
program through the gateway, under its session key.

`POST /v1/env/reset` starts the session's episode (a fresh env from the gym, `reset` on the
session's task) and returns `{messages, tools}`: the opening conversation and the tool schemas.
`POST /v1/env/step` with `{message}` (the assistant message the program got from the chat
endpoint, as it got it) returns `{messages, reward, done}`: the env's answer (user replies,
tool results), the turn's reward and whether the episode ended. Tool calls in the message are
taken as they are; a message without them is read with the run's tool parser, then as a
bracket action (`[answer] 3`). The env's `env` messages (interventions) come as user messages. The rewards add up on the session
(`EnvState.rewards`), which a program gym's `reward: env` uses.
An env that fails is a 500 and is kept on the session (`EnvState.failure`): the trajectory ends
as `env_error`. Not here: chat, sessions, running programs.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from mua.gateway.openai_wire import WireError
from mua.gym.api import AgentAction, ToolCall
from mua.rollout.toolcalls import parse_action, parse_bracket
from mua.text import clean_messages


@dataclass
class EnvState:
    """One session's episode: how to make its env, the task, and what happened."""

    make_env: Any  # () -> Env
    task: Any
    tool_parser: str = "auto"
    env: Any = None
    rewards: list[float] = field(default_factory=list)
    done: bool = False
    failure: str = ""

    async def close(self) -> None:
        if self.env is not None:
            env, self.env = self.env, None
            await env.close()


def _action(message: Any, tool_parser: str) -> AgentAction:
    if not isinstance(message, dict):
        raise WireError(400, "env/step needs {message: the assistant message}", "message")
    content = message.get("content") or ""
    calls = []
    for i, call in enumerate(message.get("tool_calls") or []):
        fn = call.get("function") or {} if isinstance(call, dict) else {}
        args = fn.get("arguments")
        if isinstance(args, str):
            try:
                args = json.loads(args)
            except ValueError:
                args = {}
        calls.append(
            ToolCall(
                str(fn.get("name", "")),
                args if isinstance(args, dict) else {},
                str(call.get("id") or f"call_{i}"),
            )
        )
    if calls:
        return AgentAction(text=str(content), tool_calls=calls, raw=str(content))
    action = parse_action(str(content), tool_parser)
    if not action.tool_calls and not action.parse_errors:  # a bracket action in plain text
        bracket = parse_bracket(str(content))
        if bracket.tool_calls:
            return bracket
    return action


def _chat_messages(messages) -> list[dict]:
    """An env's messages as chat messages: `env` messages (interventions) become user turns."""
    out = []
    for msg in clean_messages([dict(m) for m in messages]):
        msg.pop("style", None)
        if msg.get("role") == "env":
            msg["role"] = "user"
        out.append(msg)
    return out


async def _guarded(state: EnvState, what: str, call):
    try:
        return await call
    except WireError:
        raise
    except Exception as e:  # the env's failure ends the trajectory, not the run
        state.failure = f"{what} raised {type(e).__name__}: {e}"
        raise WireError(500, f"the env failed: {state.failure}", code="env_error") from None


async def env_reset(state: EnvState | None) -> dict:
    if state is None:
        raise WireError(404, "this session has no env: only program gyms offer one")
    await state.close()
    state.env = state.make_env()
    state.rewards, state.done = [], False
    reset = await _guarded(state, "env.reset", state.env.reset(state.task))
    return {
        "messages": _chat_messages(reset.messages),
        "tools": list(reset.tools or []),
    }


async def env_step(state: EnvState | None, body: Any) -> dict:
    if state is None:
        raise WireError(404, "this session has no env: only program gyms offer one")
    if state.env is None:
        raise WireError(400, "the episode has not started; POST /v1/env/reset first")
    if state.done:
        raise WireError(400, "the episode is over (done); POST /v1/env/reset to start another")
    action = _action(body.get("message") if isinstance(body, dict) else None, state.tool_parser)
    step = await _guarded(state, "env.step", state.env.step(action))
    state.rewards.append(float(step.reward))
    state.done = bool(step.done)
    return {
        "messages": _chat_messages(step.messages),
        "reward": float(step.reward),
        "done": state.done,
    }
