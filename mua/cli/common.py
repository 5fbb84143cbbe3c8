"""Shared CLI pieces: recipe argument parsing, console, progress helpers.

Kept light: imports typer and rich lazily where possible; never torch.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

RECIPE_HELP = "Recipe YAML file, then optional key=value overrides (e.g. optim.lr=1e-4)."


def split_recipe_args(args: list[str]) -> tuple[str | None, list[str]]:
    """First argument that is not key=value is the recipe path; the rest are overrides."""
    path = None
    overrides = []
    for a in args or []:
        if "=" in a and not (
            path is None and Path(a).suffix in (".yaml", ".yml") and Path(a).exists()
        ):
            overrides.append(a)
        elif path is None:
            path = a
        else:
            from mua.errors import UsageError

            raise UsageError(
                f"unexpected argument {a!r}: give one recipe file, then key=value overrides"
            )
    return path, overrides


def load(args: list[str], verb: str):
    from mua.config import load_recipe

    path, overrides = split_recipe_args(args)
    return load_recipe(path, overrides, verb=verb)


def console(stderr: bool = False):
    from rich.console import Console

    return Console(stderr=stderr, highlight=False)


def is_tty() -> bool:
    return sys.stdout.isatty() and os.environ.get("TERM") != "dumb"
