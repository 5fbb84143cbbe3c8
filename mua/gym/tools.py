"""Tools as typed Python functions: JSON schemas derived from signatures and docstrings.

`@tool` marks a function or env method; `tool_schema(fn)` gives its OpenAI-style schema; `ToolEnv`
dispatches parsed calls and turns every mistake into a tool message with an `error_kind`, never
raising on model output (only `UserFailure` passes). `run_sync` runs a synchronous tool on a
daemon thread so `rollout.call_timeout_s` fires; a cut call's result is dropped, and a tool stuck
inside one C call must bound itself.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import json
import re
import threading
import types
import typing
from typing import Any, Literal, get_args, get_origin

from mua.errors import RunFailure
from mua.gym.api import AgentAction, StepResult, ToolCall, UserFailure

_JSON_TYPES = {str: "string", int: "integer", float: "number", bool: "boolean", dict: "object"}


def tool(fn):
    """Mark a function (or env method) as a tool the model may call."""
    fn.__mua_tool__ = True
    return fn


def _type_schema(tp: Any) -> dict:
    origin = get_origin(tp)
    if tp in _JSON_TYPES:
        return {"type": _JSON_TYPES[tp]}
    if origin is Literal:
        values = list(get_args(tp))
        base = _JSON_TYPES.get(type(values[0]), "string")
        return {"type": base, "enum": values}
    if origin in (list, tuple, set):
        args = get_args(tp)
        return {"type": "array", "items": _type_schema(args[0]) if args else {}}
    if origin is dict:
        return {"type": "object"}
    if origin in (typing.Union, types.UnionType):
        arms = [a for a in get_args(tp) if a is not type(None)]
        if len(arms) == 1:
            return _type_schema(arms[0])
        return {"anyOf": [_type_schema(a) for a in arms]}
    return {"type": "string"}


def _parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """Summary and per-argument descriptions from a Google-style docstring."""
    doc = inspect.cleandoc(doc or "")
    parts = re.split(r"^\s*(?:Args|Arguments|Parameters):\s*$", doc, maxsplit=1, flags=re.M)
    summary = " ".join(parts[0].strip().split("\n\n")[0].split())
    params: dict[str, str] = {}
    if len(parts) > 1:
        current = None
        for line in parts[1].splitlines():
            if re.match(r"^\s*(Returns|Raises|Yields|Examples?):", line):
                break
            m = re.match(r"^\s*(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$", line)
            if m:
                current = m.group(1)
                params[current] = m.group(2).strip()
            elif current and line.strip():
                params[current] += " " + line.strip()
    return summary, params


def tool_schema(fn) -> dict:
    """The OpenAI function-calling schema of a typed function."""
    sig = inspect.signature(fn)
    hints = typing.get_type_hints(fn)
    summary, descriptions = _parse_docstring(fn.__doc__ or "")
    props: dict[str, dict] = {}
    required = []
    for name, p in sig.parameters.items():
        if name == "self" or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        schema = _type_schema(hints.get(name, str))
        if name in descriptions:
            schema["description"] = descriptions[name]
        props[name] = schema
        if p.default is inspect.Parameter.empty:
            required.append(name)
    return {
        "type": "function",
        "function": {
            "name": fn.__name__,
            "description": summary,
            "parameters": {"type": "object", "properties": props, "required": required},
        },
    }


def _coerce(value: Any, tp: Any) -> Any:
    """Check (and gently coerce) one argument; raise ValueError with a readable reason."""
    origin = get_origin(tp)
    if tp is Any or tp is inspect.Parameter.empty:
        return value
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in get_args(tp):
            return None
        errors = []
        for arm in get_args(tp):
            if arm is type(None):
                continue
            try:
                return _coerce(value, arm)
            except ValueError as e:
                errors.append(str(e))
        raise ValueError(" or ".join(errors))
    if origin is Literal:
        if value not in get_args(tp):
            raise ValueError(f"must be one of {list(get_args(tp))}, got {value!r}")
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            try:
                return float(value)
            except (TypeError, ValueError):
                raise ValueError(f"must be a number, got {value!r}") from None
        return float(value)
    if tp is int:
        if isinstance(value, bool):
            raise ValueError(f"must be an integer, got {value!r}")
        if isinstance(value, int):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, str) and value.strip().lstrip("-").isdigit():
            return int(value)
        raise ValueError(f"must be an integer, got {value!r}")
    if tp is str:
        if isinstance(value, (dict, list)):
            raise ValueError(f"must be a string, got {type(value).__name__}")
        return str(value)
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise ValueError(f"must be true or false, got {value!r}")
    if origin in (list, tuple, set) or tp in (list, tuple):
        if not isinstance(value, list):
            raise ValueError(f"must be a list, got {type(value).__name__}")
        args = get_args(tp)
        return [_coerce(v, args[0]) for v in value] if args else value
    if origin is dict or tp is dict:
        if not isinstance(value, dict):
            raise ValueError(f"must be an object, got {type(value).__name__}")
        return value
    return value


def bind_arguments(fn, arguments: Any) -> dict:
    """Validate a tool call's arguments against `fn`'s signature; ValueError says what is wrong."""
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError:
            raise ValueError("arguments are not valid JSON") from None
    if not isinstance(arguments, dict):
        raise ValueError(f"arguments must be a JSON object, got {type(arguments).__name__}")
    sig = inspect.signature(fn)
    hints = typing.get_type_hints(fn)
    params = {n: p for n, p in sig.parameters.items() if n != "self"}
    unknown = sorted(set(arguments) - set(params))
    if unknown:
        raise ValueError(f"unknown argument(s) {unknown}; expected {sorted(params)}")
    bound = {}
    for name, p in params.items():
        if name not in arguments:
            if p.default is inspect.Parameter.empty:
                raise ValueError(f"missing required argument {name!r}")
            continue
        try:
            bound[name] = _coerce(arguments[name], hints.get(name, Any))
        except ValueError as e:
            raise ValueError(f"argument {name!r} {e}") from None
    return bound


async def run_sync(fn, /, *args: Any, **kwargs: Any) -> Any:
    """`fn(*args, **kwargs)` on a daemon thread (with the caller's context variables), awaited
    without blocking the event loop; its exception is raised here."""
    loop = asyncio.get_running_loop()
    future = loop.create_future()
    context = contextvars.copy_context()

    def work() -> None:
        try:
            settle = (future.set_result, context.run(fn, *args, **kwargs))
        except BaseException as err:  # noqa: BLE001 - handed to the awaiting coroutine
            settle = (future.set_exception, err)
        try:
            loop.call_soon_threadsafe(_settle, future, *settle)
        except RuntimeError:  # the loop closed while the call ran: nobody waits for it
            pass

    name = f"mua-tool-{getattr(fn, '__name__', 'call')}"
    threading.Thread(target=work, name=name, daemon=True).start()
    return await future


def _settle(future: asyncio.Future, setter, value) -> None:
    if not future.cancelled():  # a deadline cut the call: its outcome is dropped
        setter(value)


class ToolEnv:
    """Base class for envs whose actions are tool calls to `@tool` methods.

    Subclasses implement `reset` and, optionally, `on_text(action)` (a turn without tool
    calls, i.e. talking to the user) and `after_tools(results)` (rewards after tool calls).
    `call_tools(action)` returns tool messages and counts of errors by kind.
    """

    def tool_methods(self) -> dict[str, Any]:
        out = {}
        for name in dir(type(self)):
            attr = getattr(type(self), name, None)
            if callable(attr) and getattr(attr, "__mua_tool__", False):
                out[name] = getattr(self, name)
        return out

    def tool_schemas(self) -> list[dict]:
        return [tool_schema(m) for m in self.tool_methods().values()]

    async def call_tool(self, call: ToolCall) -> tuple[dict, str | None]:
        """Run one call; return (tool message, error_kind or None). Never raises."""
        methods = self.tool_methods()
        fn = methods.get(call.name)
        if fn is None:
            names = ", ".join(sorted(methods)) or "none"
            return self._tool_msg(
                call, f"Error: unknown tool {call.name!r}. Available tools: {names}."
            ), "unknown_tool"
        try:
            kwargs = bind_arguments(fn, call.arguments)
        except ValueError as e:
            return self._tool_msg(
                call, f"Error: bad arguments for {call.name}: {e}."
            ), "bad_arguments"
        try:
            if inspect.iscoroutinefunction(fn):
                result = await fn(**kwargs)
            else:  # off the event loop, so the env call's deadline holds
                result = await run_sync(fn, **kwargs)
            if inspect.isawaitable(result):
                result = await result
        except (UserFailure, RunFailure):
            # the user or judge could not answer (the runner ends the trajectory, masked) or
            # refused the run's key or model (the run stops)
            raise
        except Exception as e:  # a tool bug or a rejected action must not end the rollout
            return self._tool_msg(
                call, f"Error: {call.name} failed: {type(e).__name__}: {e}"
            ), "tool_exception"
        if not isinstance(result, str):
            result = json.dumps(result, ensure_ascii=False, default=str)
        return self._tool_msg(call, result), None

    @staticmethod
    def _tool_msg(call: ToolCall, content: str) -> dict:
        return {"role": "tool", "name": call.name, "content": content}

    async def call_tools(self, action: AgentAction) -> tuple[list[dict], dict[str, int]]:
        messages, errors = [], {}
        for err in action.parse_errors:
            messages.append(
                {
                    "role": "tool",
                    "name": "parser",
                    "content": f"Error: could not read your tool call: {err}",
                }
            )
            errors["parse_error"] = errors.get("parse_error", 0) + 1
        for call in action.tool_calls:
            msg, kind = await self.call_tool(call)
            messages.append(msg)
            if kind:
                errors[kind] = errors.get(kind, 0) + 1
        return messages, errors

    async def step_tools(self, action: AgentAction) -> StepResult:
        messages, errors = await self.call_tools(action)
        return StepResult(messages=messages, info={"errors": errors} if errors else {})
