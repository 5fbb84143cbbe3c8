"""Google-style docstrings read the way tau2-bench's tool builder reads them.

tau2 turns each tool function into an OpenAI schema: the description is the docstring's first
line, plus a blank line and the rest of its opening part when there is more; each parameter
named under `Args:` gets the text after its colon (continuation lines dedented, joined by
newlines). `parse(doc)` returns that: `Doc(short, long, params)`. The docstring is cleaned as
PEP 257 says (`inspect.cleandoc`) first. Only what tool schemas need is read: returns, raises
and examples are not.
"""

from __future__ import annotations

import inspect
import re
from dataclasses import dataclass, field

_TITLES = (
    "Arguments",
    "Args",
    "Parameters",
    "Params",
    "Raises",
    "Exceptions",
    "Except",
    "Attributes",
    "Example",
    "Examples",
    "Returns",
    "Yields",
)
_PARAM_TITLES = ("Arguments", "Args", "Parameters", "Params")
_TITLE = re.compile(r"^(" + "|".join(_TITLES) + r"):[ \t\r\f\v]*$", flags=re.M)
_TYPED_NAME = re.compile(r"\s*(.+?)\s*\(\s*(.*[^\s]+)\s*\)")


@dataclass
class Doc:
    short: str | None = None
    long: str | None = None
    params: dict[str, str] = field(default_factory=dict)

    def description(self, name: str) -> str:
        """The tool description tau2 builds: short, or short + blank line + long; else the name."""
        if not self.short:
            return name
        return f"{self.short}\n\n{self.long}" if self.long else self.short


def _item(text: str) -> tuple[str, str]:
    before, _, desc = text.partition(":")
    if "\n" in before:
        first, rest = before.split("\n", 1)
        before = first + inspect.cleandoc(rest)
    if desc:
        desc = desc[1:] if desc[0] == " " else desc
        if "\n" in desc:
            first, rest = desc.split("\n", 1)
            desc = first + "\n" + inspect.cleandoc(rest)
        desc = desc.strip("\n")
    typed = _TYPED_NAME.match(before)
    return (typed.group(1) if typed else before), desc


def parse(doc: str | None) -> Doc:
    out = Doc()
    if not doc:
        return out
    text = inspect.cleandoc(doc)
    first = _TITLE.search(text)
    head, meta = (text[: first.start()], text[first.start() :]) if first else (text, "")
    parts = head.split("\n", 1)
    out.short = parts[0] or None
    if len(parts) > 1:
        out.long = (parts[1] or "").strip() or None
    titles = list(_TITLE.finditer(meta))
    for i, title in enumerate(titles):
        if title.group(1) not in _PARAM_TITLES:
            continue
        end = titles[i + 1].start() if i + 1 < len(titles) else len(meta)
        chunk = meta[title.end() : end]
        unindented = re.search(r"\n\S", chunk)
        if unindented is not None:
            chunk = chunk[: unindented.start()]
        chunk = chunk.strip("\n")
        indent = re.match(r"^\s*", chunk).group()
        starts = list(re.finditer("^" + indent + r"(?=\S)", chunk, flags=re.M))
        for j, start in enumerate(starts):
            stop = starts[j + 1].start() if j + 1 < len(starts) else len(chunk)
            part = chunk[start.end() : stop].strip("\n")
            if ":" in part:
                name, desc = _item(part)
                out.params[name] = desc
    return out
