"""Toolkits of the tau2 gym: a pydantic database plus the tools that read and change it.

A `Toolkit` subclass marks its tools with `@tool(kind=..., mutates=...)`. Every other public
method is an *environment function*: not offered to the model, but callable by name from a
task's initialization actions and environment assertions (`run_function`). `schemas()` builds
the OpenAI tool schemas from signatures and Google-style docstrings the way tau2-bench does
(pydantic `create_model` of the parameters), `call()` turns a tool's result or exception into
the tool-message text tau2 produces, and `db_hash()` hashes the database as tau2 does
(sha256 of `json.dumps(model_dump(), sort_keys=True, default=str)`).

`HUMAN_TRANSFER` is the one tool the retail and airline agents offer word for word. This module
knows no domain and no conversation; see `gyms/tau2/domain.py` for the two-sided
environment that owns an agent toolkit and an optional user toolkit.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import re
from collections.abc import Callable
from datetime import date, datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, create_model

READ, WRITE, THINK, GENERIC = "read", "write", "think", "generic"
TOOL_KINDS = (READ, WRITE, THINK, GENERIC)

_TOOL_ATTR = "__tau2_tool_kind__"
_MUTATES_ATTR = "__tau2_tool_mutates__"


def tool(kind: str = READ, mutates: bool | None = None) -> Callable:
    """Mark a method as a tool. `mutates` defaults to `kind == WRITE` (as in tau2).

    Only mutating tools are re-executed when a trajectory is replayed for the DB check.
    """
    if kind not in TOOL_KINDS:
        raise ValueError(f"unknown tool kind {kind!r}; one of {TOOL_KINDS}")
    flag = (kind == WRITE) if mutates is None else bool(mutates)

    def mark(func: Callable) -> Callable:
        setattr(func, _TOOL_ATTR, kind)
        setattr(func, _MUTATES_ATTR, flag)
        return func

    return mark


@tool(GENERIC)
def transfer_to_human_agents(self, summary: str) -> str:
    """Hand the user over to a human agent with a summary of the issue.

    Transfer only when the user explicitly asks for a human, or when the policy and
    these tools cannot resolve the issue.

    Args:
        summary: A short summary of the user's issue.
    """
    return "Transfer successful"


# The retail and airline agents' transfer tool, one function: a toolkit class names it as
# `transfer_to_human_agents = HUMAN_TRANSFER` where the tool stands in its list.
HUMAN_TRANSFER = transfer_to_human_agents


class DBModel(BaseModel):
    """Base of every tau2 database model: unknown fields are an error (tau2's `extra="forbid"`)."""

    model_config = ConfigDict(extra="forbid")


def dict_hash(obj: Any) -> str:
    """sha256 hex of `json.dumps(obj, sort_keys=True, default=str)`: tau2's database hash."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()


def deep_merge(base: dict, update: dict) -> dict:
    """`base` updated recursively by `update` (nested dicts merge, anything else replaces)."""
    out = dict(base)
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def _jsonable(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump()
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, (bool, int, float)):
        return str(value)
    if isinstance(value, list):
        return [_jsonable(v) for v in value]
    if isinstance(value, tuple):
        return tuple(_jsonable(v) for v in value)
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, (datetime, date)):
        return value.isoformat()
    raise ValueError(f"Unsupported type: {type(value)}")


def result_text(value: Any) -> str:
    """The tool-message text of a tool's return value, as tau2 writes it.

    Strings pass through; anything else is JSON of the value with models dumped and scalars
    inside containers turned into strings (tau2's own rule, kept so message texts match).
    """
    if isinstance(value, str):
        return value
    return json.dumps(_jsonable(value), default=str)


_SECTION = re.compile(r"^\s*(Args|Arguments|Parameters|Returns|Raises|Yields|Examples?)\s*:\s*$")
_ARG = re.compile(r"^\s*(\*{0,2}\w+)\s*(?:\(([^)]*)\))?\s*:\s*(.*)$")


def parse_docstring(doc: str | None) -> tuple[str, str, dict[str, str]]:
    """(short description, long description, {arg: description}) of a Google-style docstring."""
    text = inspect.cleandoc(doc or "")
    lines = text.splitlines()
    head: list[str] = []
    args: dict[str, str] = {}
    section = None
    current = None
    args_indent = 0
    for line in lines:
        match = _SECTION.match(line)
        if match:
            section = match.group(1).lower()
            current = None
            continue
        if section is None:
            head.append(line)
        elif section in ("args", "arguments", "parameters"):
            arg = _ARG.match(line)
            indent = len(line) - len(line.lstrip())
            if arg and (current is None or indent <= args_indent):
                current = arg.group(1)
                args_indent = indent
                args[current] = arg.group(3).strip()
            elif current is not None and line.strip():
                args[current] = (args[current] + "\n" + line.strip()).strip()
    paragraphs = "\n".join(head).strip().split("\n\n", 1)
    short = paragraphs[0].strip() if paragraphs and paragraphs[0].strip() else ""
    long = paragraphs[1].strip() if len(paragraphs) > 1 else ""
    return short, long, args


def function_schema(name: str, func: Callable) -> dict:
    """OpenAI tool schema of a bound method (parameters via pydantic, as tau2 builds them)."""
    short, long, arg_docs = parse_docstring(func.__doc__)
    fields: dict[str, Any] = {}
    for pname, param in inspect.signature(func, eval_str=True).parameters.items():
        anno = Any if param.annotation is param.empty else param.annotation
        default = ... if param.default is param.empty else param.default
        if pname in arg_docs:
            default = Field(default, description=arg_docs[pname])
        fields[pname] = (anno, default)
    params = create_model("parameters", **fields)
    description = name if not short else (short if not long else short + "\n\n" + long)
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": params.model_json_schema(),
        },
    }


class Toolkit:
    """A database plus the tools over it. Subclasses decorate tools with `@tool`."""

    def __init__(self, db: BaseModel | None = None):
        self.db = db

    # ---- discovery -------------------------------------------------------------------------
    @classmethod
    def tool_names(cls) -> list[str]:
        """Names of the tools, in definition order (base classes first)."""
        names: list[str] = []
        for klass in reversed(cls.__mro__):
            for name, member in vars(klass).items():
                if callable(member) and hasattr(member, _TOOL_ATTR) and name not in names:
                    names.append(name)
        return names

    def has_tool(self, name: str) -> bool:
        return name in self.tool_names()

    def tool_kind(self, name: str) -> str:
        return getattr(getattr(self, name), _TOOL_ATTR)

    def tool_mutates(self, name: str) -> bool:
        return getattr(getattr(self, name), _MUTATES_ATTR, True)

    def has_function(self, name: str) -> bool:
        """Whether `name` is a method callable by initialization actions and assertions.

        As in tau2 this is any method of the toolkit (tools, public helpers and even
        underscore helpers), never a dunder.
        """
        return not name.startswith("__") and callable(getattr(self, name, None))

    # ---- what the model sees ---------------------------------------------------------------
    def schemas(self) -> list[dict]:
        """OpenAI tool schemas, one per tool, in definition order."""
        return [function_schema(n, getattr(self, n)) for n in self.tool_names()]

    def call(self, name: str, arguments: dict) -> tuple[str, bool]:
        """Run tool `name`; (tool-message text, error flag) exactly as tau2 reports them.

        Any exception (unknown tool, bad arguments, a refusal raised by the tool) becomes
        `"Error: <message>"` with the error flag set; the database is then as the tool left it.
        """
        try:
            if not self.has_tool(name):
                raise ValueError(f"Tool '{name}' not found.")
            if not isinstance(arguments, dict):
                raise TypeError(f"arguments must be a JSON object, got {type(arguments).__name__}")
            return result_text(getattr(self, name)(**arguments)), False
        except Exception as exc:  # noqa: BLE001 - every tool failure is a message to the caller
            return result_text(f"Error: {exc}"), True

    # ---- what tasks and evaluators use -----------------------------------------------------
    def run_function(self, name: str, arguments: dict | None = None) -> Any:
        """Call a tool or an environment function by name; exceptions propagate."""
        if not self.has_function(name):
            raise ValueError(f"Function {name} not found in {type(self).__name__}")
        return getattr(self, name)(**(arguments or {}))

    def update_db(self, data: dict | None) -> None:
        """Merge `data` into the database (nested dicts merge) and re-validate, as tau2 does."""
        if self.db is None:
            raise ValueError("Database has not been initialized.")
        merged = deep_merge(self.db.model_dump(), data or {})
        self.db = type(self.db).model_validate(merged)

    def db_hash(self) -> str | None:
        """tau2's hash of this toolkit's database (None without a database)."""
        return None if self.db is None else dict_hash(self.db.model_dump())
