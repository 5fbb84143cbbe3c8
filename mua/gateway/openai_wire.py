"""The OpenAI chat-completions wire format as the gateway speaks it: request checks and replies.

`read_request(body)` accepts the fields docs/gateway.md lists; anything else, or a value it cannot
honour, is a `WireError` (HTTP 400) naming the field and what to send instead. `completion` and
`stream_events` build the answer (one JSON body, or server-sent events ending `[DONE]`).
Not here: sessions, sampling, HTTP, checking replies (`mua.gateway.structured`).
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from mua.gateway.session import ROLES, normal_message

ACCEPTED = (
    "model",
    "messages",
    "tools",
    "tool_choice",
    "response_format",
    "temperature",
    "top_p",
    "max_tokens",
    "max_completion_tokens",
    "stop",
    "n",
    "stream",
    "stream_options",
    "parallel_tool_calls",
    "user",
    "store",
)


class WireError(Exception):
    """A request the gateway refuses: `status` and an OpenAI error body."""

    def __init__(self, status: int, message: str, param: str | None = None, code: str = ""):
        super().__init__(message)
        self.status = status
        self.param = param
        self.code = code or ("invalid_request_error" if status == 400 else "error")

    def body(self, anthropic: bool = False) -> dict:
        """The error body in OpenAI's shape, or Anthropic's (`{type: error, error: {type,
        message}}`) for the Messages API."""
        if anthropic:
            kind = {
                401: "authentication_error",
                404: "not_found_error",
                405: "invalid_request_error",
            }
            kind = kind.get(
                self.status, "api_error" if self.status >= 500 else "invalid_request_error"
            )
            return {"type": "error", "error": {"type": kind, "message": str(self)}}
        return {
            "error": {
                "message": str(self),
                "type": "invalid_request_error" if self.status < 500 else "server_error",
                "param": self.param,
                "code": self.code,
            }
        }


@dataclass
class ChatRequest:
    model: str
    messages: list[dict]
    tools: list[dict] = field(default_factory=list)
    parse_tools: bool = True
    temperature: float | None = None
    max_tokens: int | None = None
    stop: list[str] = field(default_factory=list)
    stream: bool = False
    include_usage: bool = False
    response_format: dict | None = None  # json_object / json_schema: the reply is checked
    required_tool: str = ""  # tool_choice: "" auto or none, "*" required, else the named tool


def _number(body: dict, key: str, low: float, high: float | None = None) -> float | None:
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < low:
        raise WireError(400, f"{key} must be a number >= {low:g}, got {value!r}", key)
    if high is not None and value > high:
        raise WireError(400, f"{key} must be at most {high:g}, got {value!r}", key)
    return float(value)


def _max_tokens(body: dict) -> int | None:
    """The request's token limit, from `max_tokens` or `max_completion_tokens` (the error names
    the field sent; both sent must agree)."""
    given = {}
    for key in ("max_tokens", "max_completion_tokens"):
        value = body.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise WireError(400, f"{key} must be a positive integer, got {value!r}", key)
        given[key] = value
    if len(set(given.values())) > 1:
        raise WireError(
            400,
            f"max_tokens ({given['max_tokens']}) and max_completion_tokens "
            f"({given['max_completion_tokens']}) disagree; send one of them",
            "max_completion_tokens",
        )
    return next(iter(given.values()), None)


def _tools(body: dict) -> list[dict]:
    tools = body.get("tools") or []
    if not isinstance(tools, list):
        raise WireError(400, "tools must be a list of {type: function, function: {...}}", "tools")
    for i, tool in enumerate(tools):
        fn = tool.get("function") if isinstance(tool, dict) else None
        if (
            not isinstance(fn, dict)
            or tool.get("type", "function") != "function"
            or not fn.get("name")
        ):
            raise WireError(
                400,
                f"tools[{i}] must be {{type: function, function: {{name, parameters}}}}",
                "tools",
            )
    return [dict(t) for t in tools]


def _messages(body: dict) -> list[dict]:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise WireError(400, "messages must be a non-empty list", "messages")
    for i, msg in enumerate(messages):
        if not isinstance(msg, dict) or msg.get("role") not in ROLES:
            raise WireError(
                400, f"messages[{i}]: role must be one of {', '.join(ROLES)}", "messages"
            )
    return [normal_message(m) for m in messages]


def tool_choice(choice: Any, offered: list[str], param: str = "tool_choice") -> tuple[str, str]:
    """(`auto` / `none` / `required`, the required tool: "" none, "*" any, else its name) of an
    OpenAI `tool_choice`: a string or `{type: function, function: {name}}` (or the Responses
    API's `{type: function, name}`); a name the request does not offer is a 400."""
    if choice in (None, "auto", "none"):
        return choice or "auto", ""
    if choice == "required":
        if not offered:
            raise WireError(400, f'{param} "required" needs tools; send tools or auto', param)
        return "required", "*"
    fn = choice.get("function") if isinstance(choice, dict) else None
    name = (fn or {}).get("name") if isinstance(fn, dict) else None
    if isinstance(choice, dict) and choice.get("type") == "function":
        name = name or choice.get("name")
    if not isinstance(name, str) or not name:
        raise WireError(
            400,
            f"{param} {json.dumps(choice)[:80]}: send auto, none, required or "
            '{"type": "function", "function": {"name": ...}}',
            param,
        )
    if name not in offered:
        raise WireError(400, f"{param} names {name!r}, which is not among the tools sent", param)
    return "required", name


def response_format(value: Any, param: str = "response_format") -> dict | None:
    """The checked `response_format`: None for text, else `{type: json_object}` or `{type:
    json_schema, schema}` (the schema an object)."""
    if value is None:
        return None
    kind = value.get("type") if isinstance(value, dict) else None
    if kind == "text":
        return None
    if kind == "json_object":
        return {"type": "json_object"}
    if kind == "json_schema":
        spec = value.get("json_schema", value)  # chat nests it; the Responses API does not
        schema = spec.get("schema") if isinstance(spec, dict) else None
        if isinstance(schema, dict):
            return {"type": "json_schema", "name": str(spec.get("name") or ""), "schema": schema}
    raise WireError(
        400,
        f"{param} must be {{type: text}}, {{type: json_object}} or {{type: json_schema, "
        "json_schema: {name, schema}}}",
        param,
    )


def checked_body(body: Any, accepted, route: str = "") -> dict:
    """`body` when it is a JSON object holding only `accepted` fields; else a 400 naming the
    first other field (`route`, e.g. "/v1/messages", names the API in the message)."""
    if not isinstance(body, dict):
        raise WireError(400, "the body must be a JSON object")
    unknown = sorted(k for k in body if k not in accepted)
    if unknown:
        where = f"the mua gateway's {route}" if route else "the mua gateway"
        raise WireError(
            400,
            f"{unknown[0]} is not supported by {where} (it accepts {', '.join(accepted)}); "
            "remove it",
            unknown[0],
        )
    return body


def read_request(body: Any) -> ChatRequest:
    """The checked request (see the module docstring)."""
    body = checked_body(body, ACCEPTED)
    n = body.get("n", 1)
    if n not in (1, None):
        raise WireError(400, f"n={n!r}: the gateway samples one choice per request; send n=1", "n")
    if body.get("top_p") not in (None, 1, 1.0):
        raise WireError(
            400, "top_p: the run samples (and trains) at top_p 1; leave it out or send 1", "top_p"
        )
    tools = _tools(body)
    choice, required = tool_choice(body.get("tool_choice"), [t["function"]["name"] for t in tools])
    stop = body.get("stop") or []
    stop = [stop] if isinstance(stop, str) else stop
    if not isinstance(stop, list) or not all(isinstance(s, str) and s for s in stop):
        raise WireError(400, "stop must be a string or a list of non-empty strings", "stop")
    options = body.get("stream_options") or {}
    return ChatRequest(
        model=str(body.get("model") or ""),
        messages=_messages(body),
        tools=tools,
        parse_tools=choice != "none",
        response_format=response_format(body.get("response_format")),
        required_tool=required,
        temperature=_number(body, "temperature", 0.0, 2.0),
        max_tokens=_max_tokens(body),
        stop=list(stop),
        stream=bool(body.get("stream")),
        include_usage=bool(isinstance(options, dict) and options.get("include_usage")),
    )


@dataclass
class Reply:
    """One sampled answer as the caller sees it."""

    content: str
    tool_calls: list[dict]  # OpenAI shape, arguments as JSON text
    finish_reason: str  # stop, length, tool_calls
    prompt_tokens: int
    completion_tokens: int
    stop_string: str = ""  # the request's `stop` string that ended it, if one did


def _usage(reply: Reply) -> dict:
    return {
        "prompt_tokens": reply.prompt_tokens,
        "completion_tokens": reply.completion_tokens,
        "total_tokens": reply.prompt_tokens + reply.completion_tokens,
    }


def _message(reply: Reply) -> dict:
    msg: dict[str, Any] = {"role": "assistant", "content": reply.content or None}
    if reply.tool_calls:
        msg["tool_calls"] = reply.tool_calls
    else:
        msg["content"] = reply.content
    return msg


def completion(reply: Reply, model: str) -> dict:
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex[:16]}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": _message(reply), "finish_reason": reply.finish_reason}],
        "usage": _usage(reply),
    }


def stream_events(reply: Reply, model: str, include_usage: bool) -> list[str]:
    """The reply as server-sent events (each `data: ...` with its blank line), `[DONE]` last."""
    head = {
        "id": f"chatcmpl-{uuid.uuid4().hex[:16]}",
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": model,
    }

    def chunk(delta: dict, finish: str | None = None, **extra) -> str:
        body = {**head, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
        body.update(extra)
        return f"data: {json.dumps(body)}\n\n"

    events = [chunk({"role": "assistant", "content": ""})]
    if reply.content:
        events.append(chunk({"content": reply.content}))
    if reply.tool_calls:
        events.append(
            chunk({"tool_calls": [{"index": i, **c} for i, c in enumerate(reply.tool_calls)]})
        )
    events.append(chunk({}, reply.finish_reason))
    if include_usage:
        events.append(f"data: {json.dumps({**head, 'choices': [], 'usage': _usage(reply)})}\n\n")
    events.append("data: [DONE]\n\n")
    return events
