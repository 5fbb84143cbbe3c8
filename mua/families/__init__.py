"""Tool-call formats of open model families: one reader per family, a registry by name, and
`auto` detection from a chat template (`mua.families.registry`).

Public API: `FAMILIES`, `Family`, `get_family`, `detect_family`, `auto_family`, and
`mua.families.tool_calls.parse_action(text, parser, tools)`, which reads one assistant turn with
any of them. Rendering is the model's own chat template (`mua.models.chat`); nothing here
renders.
"""

from mua.families.registry import (
    ALIASES,
    FAMILIES,
    Family,
    auto_family,
    detect_family,
    for_template,
    get_family,
)

__all__ = [
    "ALIASES",
    "FAMILIES",
    "Family",
    "auto_family",
    "detect_family",
    "for_template",
    "get_family",
]
