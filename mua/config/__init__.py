"""Recipes: pydantic models per verb, YAML loading, key=value overrides, error rendering.

Public API: `load_recipe(path, overrides, verb)`, `RECIPE_MODELS`, `write_resolved`,
`read_resolved`. Importing this package imports nothing else: the public names are loaded on
first use (the recipe models import pydantic, yaml and each engine's settings model, never torch).
The base of every section is `mua.recipe_section.Section`.
"""

from __future__ import annotations

import importlib

_PUBLIC = {
    "RECIPE_MODELS": "mua.config.recipes",
    "load_recipe": "mua.config.recipe_loading",
    "parse_recipe_dict": "mua.config.recipe_loading",
    "read_resolved": "mua.config.resolved",
    "recipe_model_for": "mua.config.recipes",
    "write_resolved": "mua.config.resolved",
}

__all__ = sorted(_PUBLIC)


def __getattr__(name: str):
    if name not in _PUBLIC:
        raise AttributeError(f"module 'mua.config' has no attribute {name!r}")
    return getattr(importlib.import_module(_PUBLIC[name]), name)
