"""tau2's `calculate` tool (retail and airline) with its cost bounded.

tau2 checks that every character is one of `0123456789+-*/(). `, then runs Python's `eval` on
the expression: an integer power such as `9**9**9` then computes for hours inside the step, and
nothing can interrupt it. `arithmetic(expression)` gives tau2's result, or raises tau2's
exception with its message, for every expression whose integers stay within MAX_INT_BITS bits:
it compiles the text as `eval` does (so syntax errors read the same) and evaluates the same
syntax tree, one operation at a time in `eval`'s order, with the same Python operators. An
integer product or power that would pass MAX_INT_BITS is refused before it is computed, with
`ValueError("Number too large in expression")` (tau2's wording for its own refusals); such a
number is far outside what `float()` accepts, so tau2 ends those with an error too, unless a
later division brings it back into range. Not here: the tool's schema (the domains' tools.py).
"""

from __future__ import annotations

import ast
import operator
import warnings

ALLOWED = "0123456789+-*/(). "
MAX_INT_BITS = 1 << 16  # an intermediate integer of at most ~20,000 digits
TOO_LARGE = "Number too large in expression"

_BINARY = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Pow: operator.pow,
}
_UNARY = {ast.UAdd: operator.pos, ast.USub: operator.neg}


def arithmetic(expression: str) -> str:
    """tau2's `calculate`: the expression's value rounded to 2 decimals, as text."""
    if not all(char in ALLOWED for char in expression):
        raise ValueError("Invalid characters in expression")
    source = expression.lstrip(" ")  # eval skips leading spaces; compile does not
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SyntaxWarning)  # `2(3)`: eval warns, then fails
        compile(source, "<string>", "eval")  # eval's syntax errors, word for word
    tree = ast.parse(source, mode="eval")
    return str(round(float(_evaluate(tree.body)), 2))


def _children(node: ast.AST) -> list[ast.AST]:
    """A node's operands in the order eval computes them."""
    if isinstance(node, ast.BinOp):
        return [node.left, node.right]
    if isinstance(node, ast.UnaryOp):
        return [node.operand]
    if isinstance(node, ast.Tuple):
        return list(node.elts)
    if isinstance(node, ast.Call) and not node.keywords:
        return [node.func, *node.args]
    if isinstance(node, ast.Constant):
        return []
    raise ValueError("Invalid expression")  # nothing else is spelled with tau2's characters


def _apply(node: ast.AST, values: list):
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.BinOp):
        left, right = values
        if _too_large(node.op, left, right):
            raise ValueError(TOO_LARGE)
        return _BINARY[type(node.op)](left, right)
    if isinstance(node, ast.UnaryOp):
        return _UNARY[type(node.op)](values[0])
    if isinstance(node, ast.Tuple):
        return tuple(values)
    function, *arguments = values  # a number or a tuple: calling it raises eval's TypeError
    if callable(function):
        raise ValueError("Invalid expression")
    return function(*arguments)


def _evaluate(root: ast.AST):
    """The tree's value, operands first, left to right (no recursion: a tree may be ~3000
    operations deep, as deep as `eval` compiles)."""
    values: list = []
    stack: list[tuple[ast.AST, bool]] = [(root, False)]
    while stack:
        node, operands_done = stack.pop()
        children = _children(node)
        if operands_done:
            operands = values[len(values) - len(children) :]
            del values[len(values) - len(children) :]
            values.append(_apply(node, operands))
            continue
        stack.append((node, True))
        stack.extend((child, False) for child in reversed(children))
    return values[0]


def _too_large(op: ast.operator, left, right) -> bool:
    """Whether an integer product or power would pass MAX_INT_BITS bits (before computing it)."""
    if type(left) is not int or type(right) is not int:
        return False  # floats overflow at once; an empty tuple times n stays empty
    if isinstance(op, ast.Mult):
        return left.bit_length() + right.bit_length() - 1 > MAX_INT_BITS
    if isinstance(op, ast.Pow):
        return right > 0 and (left.bit_length() - 1) * right > MAX_INT_BITS
    return False
