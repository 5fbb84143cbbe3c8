"""Lazy "module:attribute" targets by name, for the registries of gyms and engines.

A registry holds its built-in names as import strings; third-party packages add names through an
entry-point group. Nothing is imported until a target is loaded. Not here: what a name means, or
the error for an unknown one (each registry has its own).
"""

from __future__ import annotations

import importlib
from importlib.metadata import entry_points
from typing import Any


def with_entry_points(builtin: dict[str, str], group: str) -> dict[str, str]:
    """`builtin` plus the entry points of `group` (a built-in name wins)."""
    targets = dict(builtin)
    try:
        for ep in entry_points(group=group):
            targets.setdefault(ep.name, ep.value)
    except Exception:  # a broken third-party install must not hide the built-in names
        pass
    return targets


def load_target(target: str, default_attr: str) -> Any:
    """Import "module:attribute" (the attribute defaults to `default_attr`) and return it."""
    module_name, _, attr = target.partition(":")
    return getattr(importlib.import_module(module_name), attr or default_attr)
