"""Registers every verb module on the Typer app. Adding a verb: write `mua/cli/<verb>_cmd.py`
with a `register(app)` function and list it here."""

from __future__ import annotations

import importlib

VERB_MODULES = ["prep", "train", "rollout", "eval", "merge", "recipe", "serve", "doctor", "view"]


def register_all(app) -> None:
    for name in VERB_MODULES:
        try:
            module = importlib.import_module(f"mua.cli.{name}_cmd")
        except ModuleNotFoundError as e:
            if e.name == f"mua.cli.{name}_cmd":
                continue  # verb not present in this build
            raise
        module.register(app)
