"""Anthropic's Messages API (`POST /v1/messages`) as the gateway speaks it: a request read into
the chat endpoint's `ChatRequest`, a `Reply` written back as a message or its stream events.

`read_messages(body)` accepts the fields docs/gateway.md lists; anything else is a 400 naming it,
in Anthropic's error shape. A `tool_result` is a tool message (its text; `is_error` is not
marked), a `tool_use` a call of the assistant message it is in.
Not here: sessions, sampling, HTTP (`mua.gateway.server`).
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from mua.gateway.openai_wire import ChatRequest, Reply, WireError, checked_body, read_request

ACCEPTED = (
    "model",
    "max_tokens",
    "messages",
    "system",
    "tools",
    "tool_choice",
    "output_config",
    "temperature",
    "top_p",
    "stop_sequences",
    "stream",
    "metadata",
    "thinking",
    "service_tier",
)
CHOICES = {"auto": "auto", "any": "required", "none": "none"}


def _text_blocks(content: Any, where: str) -> str:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise WireError(400, f"{where} must be a string or a list of text blocks", "messages")
    out = []
    for j, block in enumerate(content):
        if not isinstance(block, dict) or block.get("type") != "text":
            kind = block.get("type") if isinstance(block, dict) else type(block).__name__
            raise WireError(400, f"{where}[{j}] is {kind}: only text blocks are read", "messages")
        out.append(str(block.get("text", "")))
    return "".join(out)


def _user(content: list, where: str) -> list[dict]:
    """A user message's blocks: each tool_result a tool message, then the text as a user one."""
    out, text = [], []
    for j, block in enumerate(content):
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "tool_result":
            result = _text_blocks(block.get("content", ""), f"{where}[{j}].content")
            out.append(
                {
                    "role": "tool",
                    "tool_call_id": str(block.get("tool_use_id", "")),
                    "content": result,
                }
            )
        elif kind == "text":
            text.append(str(block.get("text", "")))
        else:
            raise WireError(
                400, f"{where}[{j}] is {kind}: a user message may hold text and tool_result blocks"
            )
    if text:
        out.append({"role": "user", "content": "".join(text)})
    return out


def _assistant(content: list, where: str) -> dict:
    msg: dict[str, Any] = {"role": "assistant", "content": ""}
    for j, block in enumerate(content):
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text":
            msg["content"] += str(block.get("text", ""))
        elif kind == "tool_use":
            if not block.get("name") or not block.get("id"):
                raise WireError(400, f"{where}[{j}]: a tool_use block needs id and name")
            call = {"name": str(block["name"]), "arguments": block.get("input") or {}}
            msg.setdefault("tool_calls", []).append(
                {"id": str(block["id"]), "type": "function", "function": call}
            )
        elif kind not in ("thinking", "redacted_thinking"):
            raise WireError(
                400, f"{where}[{j}] is {kind}: an assistant message may hold text and tool_use"
            )
    return msg


def chat_messages(system: Any, messages: Any) -> list[dict]:
    """`system` and `messages` as chat messages (see the module docstring)."""
    out = [{"role": "system", "content": _text_blocks(system, "system")}] if system else []
    if not isinstance(messages, list) or not messages:
        raise WireError(400, "messages must be a non-empty list", "messages")
    for i, msg in enumerate(messages):
        role = msg.get("role") if isinstance(msg, dict) else None
        content = msg.get("content") if isinstance(msg, dict) else None
        where = f"messages[{i}].content"
        if role not in ("user", "assistant"):
            raise WireError(400, f"messages[{i}]: role must be user or assistant", "messages")
        if isinstance(content, str):
            out.append({"role": role, "content": content})
        elif not isinstance(content, list):
            raise WireError(400, f"{where} must be a string or a list of blocks", "messages")
        elif role == "user":
            out.extend(_user(content, where))
        else:
            out.append(_assistant(content, where))
    return out


def _tools(tools: Any) -> list[dict]:
    if not isinstance(tools, list):
        raise WireError(400, "tools must be a list of {name, description, input_schema}", "tools")
    out = []
    for i, tool in enumerate(tools):
        if (
            not isinstance(tool, dict)
            or not tool.get("name")
            or tool.get("type") not in (None, "custom")
        ):
            raise WireError(
                400,
                f"tools[{i}] must be a client tool {{name, description, input_schema}}",
                "tools",
            )
        fn = {"name": tool["name"], "parameters": tool.get("input_schema") or {}}
        if tool.get("description"):
            fn["description"] = tool["description"]
        out.append({"type": "function", "function": fn})
    return out


def _choice(choice: Any) -> Any:
    if choice is None:
        return None
    kind = choice.get("type") if isinstance(choice, dict) else None
    if kind in CHOICES:
        return CHOICES[kind]
    if kind == "tool" and choice.get("name"):
        return {"type": "function", "function": {"name": choice["name"]}}
    raise WireError(
        400, "tool_choice must be {type: auto | any | none | tool, name}", "tool_choice"
    )


def _output_format(config: Any) -> dict | None:
    if config is None:
        return None
    fmt = config.get("format") if isinstance(config, dict) else None
    if (
        not isinstance(config, dict)
        or set(config) - {"format"}
        or (fmt is not None and (fmt.get("type") != "json_schema" or "schema" not in fmt))
    ):
        raise WireError(
            400,
            "output_config: the gateway reads format {type: json_schema, schema} only",
            "output_config",
        )
    return {"type": "json_schema", "json_schema": {"schema": fmt["schema"]}} if fmt else None


def read_messages(body: Any) -> ChatRequest:
    """The request as a `ChatRequest` (see the module docstring)."""
    body = checked_body(body, ACCEPTED, "/v1/messages")
    if "max_tokens" not in body:
        raise WireError(400, "max_tokens is required by the Messages API; send it", "max_tokens")
    thinking = body.get("thinking")
    if thinking is not None and (
        not isinstance(thinking, dict) or thinking.get("type") != "disabled"
    ):
        raise WireError(400, "thinking: the gateway samples plain turns; send {type: disabled}")
    chat = {
        "model": body.get("model"),
        "messages": chat_messages(body.get("system"), body.get("messages")),
        "tools": _tools(body.get("tools") or []),
        "tool_choice": _choice(body.get("tool_choice")),
        "response_format": _output_format(body.get("output_config")),
        "temperature": body.get("temperature"),
        "top_p": body.get("top_p"),
        "max_tokens": body.get("max_tokens"),
        "stop": body.get("stop_sequences"),
        "stream": body.get("stream"),
    }
    return read_request({k: v for k, v in chat.items() if v is not None})


def _blocks(reply: Reply) -> list[dict]:
    blocks: list[dict] = []
    if reply.content or not reply.tool_calls:
        blocks.append({"type": "text", "text": reply.content})
    for call in reply.tool_calls:
        fn = call["function"]
        blocks.append(
            {
                "type": "tool_use",
                "id": call["id"],
                "name": fn["name"],
                "input": json.loads(fn["arguments"]),
            }
        )
    return blocks


def _stop_reason(reply: Reply) -> str:
    if reply.tool_calls:
        return "tool_use"
    if reply.finish_reason == "length":
        return "max_tokens"
    return "stop_sequence" if reply.stop_string else "end_turn"


def message_object(reply: Reply, model: str) -> dict:
    return {
        "id": f"msg_{uuid.uuid4().hex[:24]}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": _blocks(reply),
        "stop_reason": _stop_reason(reply),
        "stop_sequence": reply.stop_string or None,
        "usage": {
            "input_tokens": reply.prompt_tokens,
            "output_tokens": reply.completion_tokens,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
        },
    }


def message_events(message: dict) -> list[str]:
    """The message as the Messages API's stream events, `message_stop` last."""
    usage = message["usage"]
    opening = {**message, "content": [], "stop_reason": None, "stop_sequence": None}
    opening["usage"] = {**usage, "output_tokens": 0}
    events: list[dict] = [{"type": "message_start", "message": opening}]
    for i, block in enumerate(message["content"]):
        if block["type"] == "text":
            start, delta = {**block, "text": ""}, {"type": "text_delta", "text": block["text"]}
        else:
            start = {**block, "input": {}}
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
        events += [
            {"type": "content_block_start", "index": i, "content_block": start},
            {"type": "content_block_delta", "index": i, "delta": delta},
            {"type": "content_block_stop", "index": i},
        ]
    stop = {"stop_reason": message["stop_reason"], "stop_sequence": message["stop_sequence"]}
    events += [
        {
            "type": "message_delta",
            "delta": stop,
            "usage": {"output_tokens": usage["output_tokens"]},
        },
        {"type": "message_stop"},
    ]
    return [f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events]
