"""Tools shared by both tau domains (calculate, think, transfer_to_human_agents) and the toolset base.

A toolset is an object holding one episode's `TauDB` whose `@tool` methods are the domain's
tools; `tool_methods(toolset)` lists them for `ToolEnv` dispatch, `invoke(toolset, name, args)`
runs one call the same way the env does (used to replay gold actions). Tools return strings,
as the public benchmark's tools do; precondition failures are returned as "Error: ..." text.

Deliberately not here: the domain tools themselves and any episode control (env.py ends the
episode on a transfer).
"""

from __future__ import annotations

import ast
import json
import operator

from gyms.tau.db import TauDB
from mua.gym.tools import bind_arguments, tool

TRANSFER_TOOL = "transfer_to_human_agents"
TRANSFER_OK = "Transfer successful"

_BINARY = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
}
_UNARY = {ast.UAdd: operator.pos, ast.USub: operator.neg}


def _evaluate(node: ast.AST) -> float:
    """Arithmetic over numbers with + - * / and parentheses only."""
    if isinstance(node, ast.Expression):
        return _evaluate(node.body)
    if (
        isinstance(node, ast.Constant)
        and isinstance(node.value, (int, float))
        and not isinstance(node.value, bool)
    ):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        return _BINARY[type(node.op)](_evaluate(node.left), _evaluate(node.right))
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_evaluate(node.operand))
    raise ValueError("unsupported expression")


class Toolset:
    """Base of a domain's tools: holds the episode database."""

    domain = ""

    def __init__(self, db: TauDB):
        self.db = db

    def _record_json(self, table: str, key: str, what: str) -> str:
        """The record `key` of `table` as JSON, or the tools' "Error: <what> not found"."""
        record = self.db.get(table, key)
        return json.dumps(record) if record is not None else f"Error: {what} not found"

    @tool
    def calculate(self, expression: str) -> str:
        """Calculate the result of a mathematical expression.

        Args:
            expression: The expression to calculate, such as '2 + 2'. It may contain numbers,
                operators (+, -, *, /), parentheses and spaces.
        """
        if not all(ch in "0123456789+-*/(). " for ch in expression):
            return "Error: invalid characters in expression"
        if len(expression) > 1000:
            return "Error: expression too long"
        try:
            return str(round(float(_evaluate(ast.parse(expression, mode="eval"))), 2))
        except ZeroDivisionError:
            return "Error: division by zero"
        except (SyntaxError, ValueError, OverflowError, RecursionError, TypeError) as e:
            return f"Error: {type(e).__name__}: invalid expression"

    @tool
    def think(self, thought: str) -> str:
        """Use the tool to think about something. It will not obtain new information or change the database, but just append the thought to the log. Use it when complex reasoning is needed.

        Args:
            thought: A thought to think about.
        """
        return ""

    @tool
    def transfer_to_human_agents(self, summary: str) -> str:
        """Transfer the user to a human agent, with a summary of the user's issue. Only transfer if the user explicitly asks for a human agent, or if the user's issue cannot be resolved by the agent with the available tools.

        Args:
            summary: A summary of the user's issue.
        """
        return TRANSFER_OK


def tool_methods(toolset: Toolset) -> dict:
    """Name -> bound `@tool` method of a toolset."""
    out = {}
    for name in dir(type(toolset)):
        attr = getattr(type(toolset), name, None)
        if callable(attr) and getattr(attr, "__mua_tool__", False):
            out[name] = getattr(toolset, name)
    return out


def invoke(toolset: Toolset, name: str, arguments) -> str:
    """Run one tool call like the env does; any mistake becomes an "Error: ..." string."""
    fn = tool_methods(toolset).get(name)
    if fn is None:
        return f"Error: unknown tool {name!r}"
    try:
        kwargs = bind_arguments(fn, arguments)
        return fn(**kwargs)
    except Exception as e:  # a rejected call changes nothing more than the public tools would
        return f"Error: {e}"
