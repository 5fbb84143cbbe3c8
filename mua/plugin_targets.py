"""Lazy "module:attribute" targets: the registries of gyms and engines, and a program gym's
`entry_point`.

Built-in names are import strings, third-party ones come from an entry-point group; nothing is
imported until loaded. A program's `entry_point` is looked up in the folder `mua` runs in first,
then installed packages, as `python -m` does (on `sys.path` only while found or imported).
Not here: what a name means, unknown-name errors, starting a program (`mua.gateway`).
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from importlib.metadata import entry_points
from typing import Any

from mua.errors import UsageError


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


@contextmanager
def _working_dir_first() -> Iterator[str]:
    """`sys.path` with the working directory first, restored after; yields the directory."""
    cwd = os.getcwd()
    sys.path.insert(0, cwd)
    try:
        yield cwd
    finally:
        sys.path.remove(cwd)  # the first occurrence: the one inserted above


def missing_module(target: str) -> str | None:
    """Why the module of `target` (`module:function`) cannot be found, or None when it can;
    finding it runs its parent packages' `__init__`, not the module itself."""
    module = target.partition(":")[0]
    with _working_dir_first() as cwd:
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):
            found = False
    if found:
        return None
    return (
        f"program.entry_point module {module!r} cannot be imported from {cwd} (the folder mua "
        "runs in) or the installed packages; run mua from the folder that holds it"
    )


def load_entry_point(target: str):
    """The function `target` (`module:function`) names, its module imported with the working
    directory first on the path; a UsageError naming it when it cannot be loaded."""
    module, _, name = target.partition(":")
    with _working_dir_first():
        try:
            return getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError) as e:
            raise UsageError(f"program.entry_point {target!r} cannot be loaded: {e}") from None
