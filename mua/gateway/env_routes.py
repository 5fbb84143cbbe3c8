"""A program gym's environment over HTTP: the gym's simulated user and tools, offered to the
program through the gateway, under its session key.

`POST /v1/env/reset` returns `{messages, tools}`; `POST /v1/env/step` with `{message}` returns
`{messages, reward, done}` (docs/gateway.md). Tool calls are checked (a bad one is a 400 and the
env never sees the step); text is read with the run's tool parser, then as a bracket action.
Rewards add up on the session (`EnvState.rewards`, for `reward: env`); an env that fails is a 500
kept as `EnvState.failure` (the trajectory ends as `env_error`).
Not here: chat, sessions, running programs.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from mua.families.bracket import parse_bracket
from mua.families.tool_calls import parse_action, read_native_calls
from mua.gateway.openai_wire import WireError
from mua.gateway.session import content_text
from mua.gym.api import AgentAction, ToolCall
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


_CALL_SHAPE = "{id, type: function, function: {name, arguments}}"


def _snippet(value: Any) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= 60 else text[:57] + "..."


def _tool_calls(raw: Any) -> list[ToolCall]:
    """The message's OpenAI `tool_calls`, checked: a 400 naming the first one that is not a
    call with a name and JSON-object arguments (as the chat endpoint returns them)."""
    if raw is None or raw == []:
        return []
    if not isinstance(raw, list):
        shape = f"message.tool_calls must be a list of {_CALL_SHAPE}, got {_snippet(raw)}"
        raise WireError(400, shape, "message")
    calls = []
    for i, call in enumerate(raw):
        if not isinstance(call, dict) or not isinstance(call.get("function"), dict):
            shape = f"message.tool_calls[{i}] must be an object {_CALL_SHAPE}, got {_snippet(call)}"
            raise WireError(400, shape, "message")
        read, errors = read_native_calls([call])
        if errors:
            raise WireError(400, f"message.tool_calls[{i}]: {errors[0]}", "message")
        fn = read[0]["function"]
        call_id = read[0]["id"] if call.get("id") else f"call_{i}"
        calls.append(ToolCall(fn["name"], fn["arguments"], call_id))
    return calls


def _action(message: Any, tool_parser: str) -> AgentAction:
    if not isinstance(message, dict):
        raise WireError(400, "env/step needs {message: the assistant message}", "message")
    content = content_text(message.get("content"))
    calls = _tool_calls(message.get("tool_calls"))
    if calls:
        return AgentAction(text=content, tool_calls=calls, raw=content)
    action = parse_action(content, tool_parser)
    if not action.tool_calls and not action.parse_errors:  # a bracket action in plain text
        bracket = parse_bracket(content)
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
