"""Safe evaluation of hidden arithmetic rules over a, b, c, d.

Rules are Python-syntax expressions using only the names a, b, c, d, numbers, + - * / and **
(UserRL's public rules use exactly these). They are parsed with `ast` and walked by hand, never
passed to `eval`. Results that are not finite real numbers (division by zero, overflow, a
negative base raised to a fractional power, exponents past a limit) raise `RuleError`.
"""

from __future__ import annotations

import ast
import math
import operator

VARIABLES = ("a", "b", "c", "d")
MAX_ABS_EXPONENT = 64
_BINARY = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.Pow: operator.pow,
}


class RuleError(ValueError):
    """The rule cannot be evaluated on these inputs (or is not a valid rule)."""


def parse_rule(rule: str) -> ast.Expression:
    try:
        tree = ast.parse(rule, mode="eval")
    except SyntaxError as e:
        raise RuleError(f"rule {rule!r} is not a valid expression: {e.msg}") from None
    for node in ast.walk(tree):
        ok = isinstance(
            node, (ast.Expression, ast.BinOp, ast.UnaryOp, ast.USub, ast.UAdd, ast.Load, *_BINARY)
        )
        ok = ok or (isinstance(node, ast.Name) and node.id in VARIABLES)
        ok = ok or (
            isinstance(node, ast.Constant)
            and isinstance(node.value, (int, float))
            and not isinstance(node.value, bool)
        )
        if not ok:
            raise RuleError(f"rule {rule!r} uses {type(node).__name__}, which is not allowed")
    return tree


def evaluate(rule: str | ast.Expression, values: list[float] | tuple[float, ...]) -> float:
    """The rule's value at (a, b, c, d) = values, as a finite float."""
    tree = parse_rule(rule) if isinstance(rule, str) else rule
    env = dict(zip(VARIABLES, (float(v) for v in values), strict=False))
    try:
        result = _walk(tree.body, env)
    except (ZeroDivisionError, OverflowError):
        raise RuleError("undefined for these inputs (division by zero or overflow)") from None
    if isinstance(result, complex) or not math.isfinite(result):
        raise RuleError("undefined for these inputs (not a finite real number)")
    return float(result)


def _walk(node: ast.AST, env: dict[str, float]) -> float:
    if isinstance(node, ast.Constant):
        return float(node.value)
    if isinstance(node, ast.Name):
        return env[node.id]
    if isinstance(node, ast.UnaryOp):
        value = _walk(node.operand, env)
        return -value if isinstance(node.op, ast.USub) else value
    left, right = _walk(node.left, env), _walk(node.right, env)
    if isinstance(left, complex) or isinstance(right, complex):
        raise RuleError("undefined for these inputs (not a finite real number)")
    if (
        isinstance(node.op, ast.Pow)
        and abs(right) > MAX_ABS_EXPONENT
        and abs(left) not in (0.0, 1.0)
    ):
        raise RuleError(
            f"undefined for these inputs (exponent {right:g} beyond {MAX_ABS_EXPONENT})"
        )
    return _BINARY[type(node.op)](left, right)
