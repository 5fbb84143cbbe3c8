"""Structured output and forced tool calls, checked: `unmet(req, content, calls)` says whether a
reply honours the request's `response_format` and its `tool_choice`.

No engine constrains sampling (its log-probs would no longer be the policy's: docs/gateway.md),
so a reply that misses is returned as written and counted, never refused. `follows(value, schema)`
checks the keywords structured-output schemas use; formats, lengths and patterns are not checked.
Not here: reading requests (`mua.gateway.openai_wire`), sampling.
"""

from __future__ import annotations

import json
from typing import Any

_TYPES: dict[str, Any] = {
    "object": dict,
    "array": list,
    "string": str,
    "boolean": bool,
    "null": type(None),
}
MAX_REF_DEPTH = 64


def _is_type(value: Any, kind: str) -> bool:
    if kind == "integer":
        return (
            isinstance(value, int)
            and not isinstance(value, bool)
            or (isinstance(value, float) and value.is_integer())
        )
    if kind == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    expected = _TYPES.get(kind)
    return expected is None or isinstance(value, expected)


def _resolve(ref: str, root: dict) -> dict:
    node: Any = root
    for part in ref.lstrip("#/").split("/") if ref != "#" else []:
        node = (
            node.get(part.replace("~1", "/").replace("~0", "~")) if isinstance(node, dict) else None
        )
    return node if isinstance(node, dict) else {}


def follows(value: Any, schema: Any, root: dict | None = None, depth: int = 0) -> bool:
    """Whether `value` follows `schema` (the keywords in the module docstring)."""
    if not isinstance(schema, dict) or depth > MAX_REF_DEPTH:
        return schema is not False
    root = schema if root is None else root
    if "$ref" in schema:
        return follows(value, _resolve(str(schema["$ref"]), root), root, depth + 1)
    kinds = schema.get("type")
    if kinds is not None:
        kinds = kinds if isinstance(kinds, list) else [kinds]
        if not any(_is_type(value, str(k)) for k in kinds):
            return False
    if "enum" in schema and value not in schema["enum"]:
        return False
    if "const" in schema and value != schema["const"]:
        return False
    for key, need in (("anyOf", 1), ("oneOf", 1)):
        if key in schema and sum(follows(value, s, root, depth + 1) for s in schema[key]) < need:
            return False
    if "allOf" in schema and not all(follows(value, s, root, depth + 1) for s in schema["allOf"]):
        return False
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        if any(k not in value for k in schema.get("required") or []):
            return False
        extra = schema.get("additionalProperties", True)
        for k, v in value.items():
            if k in props:
                if not follows(v, props[k], root, depth + 1):
                    return False
            elif extra is False or (
                isinstance(extra, dict) and not follows(v, extra, root, depth + 1)
            ):
                return False
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        return all(follows(v, schema["items"], root, depth + 1) for v in value)
    return True


def structured_ok(content: str, fmt: dict) -> bool:
    """Whether `content` is one JSON object (following `fmt`'s schema when it has one)."""
    try:
        value = json.loads(content)
    except ValueError:
        return False
    if fmt.get("type") == "json_schema":
        return follows(value, fmt["schema"])
    return isinstance(value, dict)


def unmet(req, content: str, calls: list[dict]) -> tuple[bool, bool]:
    """(structured output missed, tool choice missed) for a reply of `req` (a `ChatRequest`)."""
    structured = bool(req.response_format) and not calls
    bad_format = structured and not structured_ok(content, req.response_format)
    names = [c["function"]["name"] for c in calls]
    wanted = req.required_tool
    bad_choice = bool(wanted) and (not names if wanted == "*" else wanted not in names)
    return bad_format, bad_choice
