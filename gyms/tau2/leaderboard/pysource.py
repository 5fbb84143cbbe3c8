"""Reading constants out of Python source without importing it (ast only).

`constants(path)` evaluates a module's top-level `NAME = <expr>` assignments whose value is
built from string literals: `"..."`, a triple-quoted literal with `.strip()` (and lstrip/rstrip), `+`, earlier
names, and `/` joins of path parts (`DATA_DIR / "tau2" / "x.md"`, with names the caller gives,
e.g. `DATA_DIR`). Anything else is skipped. `call_keyword(path, name, keyword)` is the literal
keyword argument of a top-level `NAME = Callee(..., keyword="...")`. Nothing is executed.
"""

from __future__ import annotations

import ast
from pathlib import Path, PurePosixPath

_STRIPS = ("strip", "lstrip", "rstrip")


class _Skip(Exception):
    pass


def _value(node: ast.AST, known: dict):
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.Name):
        if node.id in known:
            return known[node.id]
        raise _Skip
    if isinstance(node, ast.Call) and not node.args and not node.keywords:
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr in _STRIPS:
            base = _value(func.value, known)
            if isinstance(base, str):
                return getattr(base, func.attr)()
        raise _Skip
    if isinstance(node, ast.BinOp):
        left, right = _value(node.left, known), _value(node.right, known)
        if isinstance(node.op, ast.Add) and isinstance(left, str) and isinstance(right, str):
            return left + right
        if isinstance(node.op, ast.Div) and isinstance(left, PurePosixPath | Path):
            return left / right
        raise _Skip
    raise _Skip


def module_tree(path: Path) -> ast.Module:
    return ast.parse(Path(path).read_text(encoding="utf-8"), filename=str(path))


def constants(path: Path, names: dict | None = None) -> dict:
    """NAME -> value of the string (and path) constants at the top of module `path`."""
    known = dict(names or {})
    for node in module_tree(path).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            target, value = node.target, node.value
        else:
            continue
        if not isinstance(target, ast.Name):
            continue
        try:
            known[target.id] = _value(value, known)
        except _Skip:
            continue
    return known


def call_keyword(path: Path, name: str, keyword: str) -> str | None:
    """The string literal given as `keyword=` in the top-level `name = Callee(...)`."""
    for node in module_tree(path).body:
        if (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
            and node.targets[0].id == name
            and isinstance(node.value, ast.Call)
        ):
            for kw in node.value.keywords:
                if kw.arg == keyword:
                    try:
                        value = _value(kw.value, {})
                    except _Skip:
                        return None
                    return value if isinstance(value, str) else None
    return None
