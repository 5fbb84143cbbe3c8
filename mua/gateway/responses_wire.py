"""The OpenAI Responses API (`POST /v1/responses`) as the gateway speaks it: a request read into
the chat endpoint's `ChatRequest`, a `Reply` written back as a response object or its events.

`read_responses(body, stored)` accepts the fields docs/gateway.md lists (`previous_response_id`
takes a response this session stored); anything else is a 400 naming it. A turn cut by the token
budget is `completed` with `incomplete_details.reason: max_output_tokens`, since an `incomplete`
response makes the Agents SDK raise. Not here: sessions, sampling, HTTP (`mua.gateway.server`).
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

from mua.gateway.openai_wire import (
    ChatRequest,
    Reply,
    WireError,
    checked_body,
    read_request,
    response_format,
)

ACCEPTED = (
    "model",
    "input",
    "instructions",
    "tools",
    "tool_choice",
    "text",
    "temperature",
    "top_p",
    "max_output_tokens",
    "parallel_tool_calls",
    "stream",
    "previous_response_id",
    "store",
    "include",
    "truncation",
    "metadata",
    "user",
    "prompt_cache_key",
    "safety_identifier",
)
TEXT_PARTS = ("input_text", "output_text", "text")
KEPT_RESPONSES = 256  # per session, for previous_response_id


def _text(content: Any, where: str) -> str:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise WireError(400, f"{where}.content must be a string or a list of text parts", "input")
    parts = []
    for j, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind not in TEXT_PARTS:
            raise WireError(
                400,
                f"{where}.content[{j}] is {kind or type(part).__name__}: the gateway reads text "
                f"parts only ({', '.join(TEXT_PARTS)})",
                "input",
            )
        parts.append(str(part.get("text", "")))
    return "".join(parts)


def _call(item: dict, where: str) -> dict:
    if not item.get("name") or not item.get("call_id"):
        raise WireError(400, f"{where}: a function_call needs name and call_id", "input")
    arguments = item.get("arguments", "")
    return {
        "id": str(item["call_id"]),
        "type": "function",
        "function": {"name": str(item["name"]), "arguments": arguments},
    }


def input_messages(items: Any) -> list[dict]:
    """Responses input items as chat messages: a `function_call` joins the assistant message
    before it (or starts one), a `function_call_output` is a tool message."""
    if isinstance(items, str):
        return [{"role": "user", "content": items}]
    if not isinstance(items, list):
        raise WireError(400, "input must be a string or a list of items", "input")
    out: list[dict] = []
    for i, item in enumerate(items):
        where = f"input[{i}]"
        kind = item.get("type", "message") if isinstance(item, dict) else None
        if kind == "message":
            role = item.get("role")
            if role not in ("system", "developer", "user", "assistant"):
                raise WireError(400, f"{where}: role must be system, developer, user or assistant")
            out.append({"role": role, "content": _text(item.get("content"), where)})
        elif kind == "function_call":
            if not out or out[-1]["role"] != "assistant":
                out.append({"role": "assistant", "content": ""})
            out[-1].setdefault("tool_calls", []).append(_call(item, where))
        elif kind == "function_call_output":
            output = item.get("output")
            text = output if isinstance(output, str) else _text(output, where)
            out.append(
                {"role": "tool", "tool_call_id": str(item.get("call_id", "")), "content": text}
            )
        elif kind != "reasoning":
            raise WireError(
                400,
                f"{where} is of type {kind!r}: the gateway reads message, function_call, "
                "function_call_output (and drops reasoning) items",
                "input",
            )
    return out


def _tools(tools: Any) -> list[dict]:
    if not isinstance(tools, list):
        raise WireError(400, "tools must be a list of {type: function, name, parameters}", "tools")
    out = []
    for i, tool in enumerate(tools):
        if not isinstance(tool, dict) or tool.get("type") != "function" or not tool.get("name"):
            kind = tool.get("type") if isinstance(tool, dict) else tool
            raise WireError(
                400,
                f"tools[{i}] is {kind!r}: the gateway serves function tools only "
                "({type: function, name, parameters})",
                "tools",
            )
        fn = {"name": tool["name"], "parameters": tool.get("parameters") or {}}
        if tool.get("description"):
            fn["description"] = tool["description"]
        out.append({"type": "function", "function": fn})
    return out


def _check_extras(body: Any) -> None:
    body = checked_body(body, ACCEPTED, "/v1/responses")
    include = body.get("include") or []
    if not isinstance(include, list) or any(i != "reasoning.encrypted_content" for i in include):
        raise WireError(
            400, f"include {include!r}: the gateway adds nothing; leave it out", "include"
        )
    if body.get("truncation") not in (None, "disabled"):
        raise WireError(
            400, "truncation: the gateway never drops input; send disabled", "truncation"
        )


def read_responses(body: Any, stored: dict[str, list[dict]]) -> tuple[ChatRequest, list[dict]]:
    """The request as a `ChatRequest` and its conversation without `instructions` (what a later
    `previous_response_id` continues); see the module docstring."""
    _check_extras(body)
    history: list[dict] = []
    previous = body.get("previous_response_id")
    if previous is not None:
        if previous not in stored:
            raise WireError(
                400,
                f"previous_response_id {str(previous)[:60]!r} is not a response of this session "
                "(or was sent with store: false); send the whole input instead",
                "previous_response_id",
            )
        history = [dict(m) for m in stored[previous]]
    conversation = history + input_messages(body.get("input", []))
    instructions = body.get("instructions")
    system = [{"role": "system", "content": str(instructions)}] if instructions else []
    text = body.get("text") or {}
    if not isinstance(text, dict) or set(text) - {"format"}:
        extra = sorted(set(text) - {"format"}) if isinstance(text, dict) else [text]
        raise WireError(
            400,
            f"text.{extra[0]} is not supported (the gateway reads text.format only); remove it "
            "(the Agents SDK sends text.verbosity for gpt-5 model names: name MUA_MODEL)",
            "text",
        )
    fmt = response_format(text.get("format") if isinstance(text, dict) else text, "text.format")
    chat = {
        "model": body.get("model"),
        "messages": system + conversation,
        "tools": _tools(body.get("tools") or []),
        "tool_choice": body.get("tool_choice"),
        "temperature": body.get("temperature"),
        "top_p": body.get("top_p"),
        "max_tokens": body.get("max_output_tokens"),
        "parallel_tool_calls": body.get("parallel_tool_calls"),
        "stream": body.get("stream"),
    }
    limit = body.get("max_output_tokens")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise WireError(400, f"max_output_tokens must be a positive integer, got {limit!r}")
    req = read_request({k: v for k, v in chat.items() if v is not None})
    req.response_format = fmt
    return req, conversation


def output_items(reply: Reply) -> list[dict]:
    """The reply as Responses output items: its text as a message, each call a function_call."""
    items = []
    if reply.content or not reply.tool_calls:
        part = {"type": "output_text", "text": reply.content, "annotations": [], "logprobs": []}
        items.append(
            {
                "type": "message",
                "id": f"msg_{uuid.uuid4().hex[:24]}",
                "status": "completed",
                "role": "assistant",
                "content": [part],
            }
        )
    for call in reply.tool_calls:
        items.append(
            {
                "type": "function_call",
                "id": f"fc_{uuid.uuid4().hex[:24]}",
                "call_id": call["id"],
                "name": call["function"]["name"],
                "arguments": call["function"]["arguments"],
                "status": "completed",
            }
        )
    return items


def response_object(reply: Reply, req: ChatRequest, body: dict, rid: str, output: list) -> dict:
    """The response object of `reply` (status `completed`; see the module docstring)."""
    fmt = req.response_format or {"type": "text"}
    if fmt.get("type") == "json_schema":
        fmt = {"type": "json_schema", "name": fmt["name"], "schema": fmt["schema"], "strict": True}
    cut = reply.finish_reason == "length"
    return {
        "id": rid,
        "object": "response",
        "created_at": int(time.time()),
        "status": "completed",
        "error": None,
        "incomplete_details": {"reason": "max_output_tokens"} if cut else None,
        "instructions": body.get("instructions"),
        "max_output_tokens": body.get("max_output_tokens"),
        "model": req.model or body.get("model") or "",
        "output": output,
        "parallel_tool_calls": body.get("parallel_tool_calls", True),
        "previous_response_id": body.get("previous_response_id"),
        "store": body.get("store", True),
        "temperature": body.get("temperature", 1.0),
        "text": {"format": fmt},
        "tool_choice": body.get("tool_choice", "auto"),
        "tools": body.get("tools") or [],
        "top_p": 1.0,
        "truncation": "disabled",
        "metadata": body.get("metadata") or {},
        "usage": {
            "input_tokens": reply.prompt_tokens,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": reply.completion_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": reply.prompt_tokens + reply.completion_tokens,
        },
    }


def _item_events(index: int, item: dict) -> list[dict]:
    head = {"output_index": index, "item_id": item["id"]}
    if item["type"] == "function_call":
        opened = {**item, "arguments": "", "status": "in_progress"}
        args = item["arguments"]
        return [
            {"type": "response.output_item.added", "output_index": index, "item": opened},
            {"type": "response.function_call_arguments.delta", **head, "delta": args},
            {"type": "response.function_call_arguments.done", **head, "arguments": args},
            {"type": "response.output_item.done", "output_index": index, "item": item},
        ]
    part = item["content"][0]
    text, at = part["text"], {**head, "content_index": 0}
    return [
        {
            "type": "response.output_item.added",
            "output_index": index,
            "item": {**item, "status": "in_progress", "content": []},
        },
        {"type": "response.content_part.added", **at, "part": {**part, "text": ""}},
        {"type": "response.output_text.delta", **at, "delta": text, "logprobs": []},
        {"type": "response.output_text.done", **at, "text": text, "logprobs": []},
        {"type": "response.content_part.done", **at, "part": part},
        {"type": "response.output_item.done", "output_index": index, "item": item},
    ]


def response_events(response: dict) -> list[str]:
    """The response as the Responses API's server-sent events, `response.completed` last."""
    opening = {**response, "status": "in_progress", "output": [], "usage": None}
    events: list[dict] = [
        {"type": "response.created", "response": opening},
        {"type": "response.in_progress", "response": opening},
    ]
    for i, item in enumerate(response["output"]):
        events.extend(_item_events(i, item))
    events.append({"type": "response.completed", "response": response})
    return [
        f"event: {e['type']}\ndata: {json.dumps({**e, 'sequence_number': n})}\n\n"
        for n, e in enumerate(events)
    ]


def remember(stored: dict[str, list[dict]], rid: str, conversation: list[dict]) -> None:
    """Keep a response's conversation for `previous_response_id` (the newest KEPT_RESPONSES)."""
    stored[rid] = conversation
    while len(stored) > KEPT_RESPONSES:
        stored.pop(next(iter(stored)))
