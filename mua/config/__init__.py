"""Recipes: pydantic models per verb, YAML loading, key=value overrides, error rendering.

Public API: `load_recipe(path, overrides, verb)`, `RECIPE_MODELS`, `write_resolved`,
`read_resolved`. Importing this package imports pydantic and yaml only (no torch).
"""

from mua.config.recipe_loading import load_recipe, parse_recipe_dict
from mua.config.recipes import RECIPE_MODELS, recipe_model_for
from mua.config.resolved import read_resolved, write_resolved

__all__ = [
    "RECIPE_MODELS",
    "load_recipe",
    "parse_recipe_dict",
    "read_resolved",
    "recipe_model_for",
    "write_resolved",
]
