"""Argument descriptions a toolkit writes once for all of its tools: `shared_args`.

The model reads a tool's description and argument texts from its Google-style docstring
(`mua.gym.tools.tool_schema`, tau2's `gyms.tau2.toolkit.function_schema`). Where several tools
of a toolkit take an argument of the same meaning, the toolkit class is decorated with
`@shared_args({name: text})`: each public method taking `name` whose docstring does not describe
it gets the line `name: text` in its `Args:` section, so the schemas read exactly as if each
docstring spelt it out. A multi-line `text` is written as continuation lines. What a docstring
says itself always wins; nothing else in it changes.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable

_ARGS_TITLE = re.compile(r"^(Args|Arguments|Parameters):\s*$", re.M)
_ARG_LINE = re.compile(r"^    (\w+)\s*(?:\([^)]*\))?\s*:", re.M)


def _arg_lines(name: str, text: str) -> str:
    first, *rest = text.split("\n")
    return "\n".join([f"    {name}: {first}", *(f"        {line}" for line in rest)])


def document_args(func: Callable, table: dict[str, str]) -> None:
    """Add to `func`'s docstring the `table` lines of the parameters it takes but leaves out."""
    doc = inspect.cleandoc(func.__doc__ or "")
    title = _ARGS_TITLE.search(doc)
    own = set(_ARG_LINE.findall(doc[title.end() :])) if title else set()
    missing = [
        name for name in inspect.signature(func).parameters if name in table and name not in own
    ]
    if not missing:
        return
    lines = "\n".join(_arg_lines(name, table[name]) for name in missing)
    func.__doc__ = f"{doc}\n{lines}" if title else f"{doc}\n\nArgs:\n{lines}"


def shared_args(table: dict[str, str]) -> Callable[[type], type]:
    """Class decorator: `document_args(method, table)` for each public method of the class."""

    def decorate(cls: type) -> type:
        for name, member in vars(cls).items():
            if not name.startswith("_") and inspect.isfunction(member):
                document_args(member, table)
        return cls

    return decorate
