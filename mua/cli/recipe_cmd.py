"""`mua recipe`: list, show, validate, print the schema of, and copy recipes.

Validation uses the same loader as every verb, so a recipe that validates here runs there.
"""

from __future__ import annotations

import glob
from pathlib import Path

import typer

recipe_app = typer.Typer(
    help="List, show, validate, copy recipes and print their schema.\n\n"
    "Examples:\n\n"
    "  mua recipe ls\n\n"
    "  mua recipe validate recipes/*.yaml\n\n"
    "  mua recipe schema train\n\n"
    "  mua recipe cp quickstart my_run.yaml",
    no_args_is_help=True,
)


def _recipes_dir() -> Path:
    here = Path.cwd() / "recipes"
    if here.is_dir():
        return here
    return Path(__file__).resolve().parents[2] / "recipes"


def _find(name: str) -> Path:
    from mua.errors import UsageError

    p = Path(name)
    if p.exists():
        return p
    for cand in (_recipes_dir() / name, _recipes_dir() / f"{name}.yaml"):
        if cand.exists():
            return cand
    raise UsageError(f"recipe {name!r} not found; see `mua recipe ls`")


@recipe_app.command("ls")
def ls_cmd() -> None:
    """List the shipped recipes with their verb and description."""
    import yaml
    from rich.table import Table

    from mua.cli.common import console

    table = Table("recipe", "verb", "description")
    for p in sorted(_recipes_dir().rglob("*.yaml")):
        try:
            raw = yaml.safe_load(p.read_text()) or {}
        except yaml.YAMLError:
            raw = {}
        rel = p.relative_to(_recipes_dir().parent)
        table.add_row(str(rel), str(raw.get("verb", "train")), str(raw.get("description", "")))
    console().print(table)


@recipe_app.command("show")
def show_cmd(
    args: list[str] = typer.Argument(..., help="Recipe then key=value overrides."),
) -> None:
    """Print a recipe fully resolved (defaults filled in, overrides applied).

    Example: mua recipe show recipes/quickstart.yaml optim.lr=3e-4
    """
    import yaml

    from mua.cli.common import split_recipe_args
    from mua.config.recipe_loading import infer_verb, load_recipe, read_yaml

    path, overrides = split_recipe_args(args)
    path = str(_find(path))
    recipe = load_recipe(path, overrides, verb=infer_verb(path, read_yaml(path)))
    typer.echo(yaml.safe_dump(recipe.model_dump(mode="json"), sort_keys=False))


@recipe_app.command("validate")
def validate_cmd(paths: list[str] = typer.Argument(..., help="Recipe files or globs.")) -> None:
    """Validate recipe files; exit 2 on the first file with problems (all problems listed).

    A valid GRPO recipe whose credit or aggregation biases the update when the policy decides
    when to stop gets one warning line per setting on stderr (docs/algorithms.md §3).

    Example: mua recipe validate recipes/*.yaml recipes/seeds/*.yaml
    """
    from mua.cli.common import console
    from mua.config.recipe_loading import infer_verb, load_recipe, read_yaml
    from mua.config.stopping_bias import stopping_bias_warnings
    from mua.errors import MuaError, UsageError

    files: list[str] = []
    for p in paths:
        matched = sorted(glob.glob(p, recursive=True))
        files.extend(matched or [p])
    failures = []
    for f in files:
        try:
            recipe = load_recipe(f, [], verb=infer_verb(f, read_yaml(f)))
            console().print(f"[green]ok[/] {f}")
            for line in stopping_bias_warnings(recipe):
                typer.echo(f"warning: {f}: {line}", err=True)
        except MuaError as e:
            failures.append(str(e))
    if failures:
        raise UsageError("\n".join(failures))


@recipe_app.command("schema")
def schema_cmd(
    verb: str = typer.Argument(
        "train",
        help="train, rollout, eval, merge, prep, or alternate (a train recipe with `alternate:`).",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print JSON Schema instead of a table."),
) -> None:
    """Print every field of a verb's recipe with its type, default and description.

    Example: mua recipe schema train

    Example: mua recipe schema alternate
    """
    import json

    from mua.config import RECIPE_MODELS
    from mua.config.recipes import AlternateRecipe
    from mua.errors import UsageError

    models = {**RECIPE_MODELS, "alternate": AlternateRecipe}
    if verb not in models:
        raise UsageError(f"unknown verb {verb!r}; one of {', '.join(models)}")
    model = models[verb]
    if as_json:
        typer.echo(json.dumps(model.model_json_schema(), indent=2))
        return
    from rich.table import Table

    from mua.cli.common import console
    from mua.config.schema_rows import schema_rows

    table = Table("field", "type", "default", "description", show_lines=False)
    for row in schema_rows(model):
        table.add_row(*row)
    console().print(table)
    if verb == "train":
        console().print(
            "A train recipe with `alternate:` trains an agent and a user in turns: "
            "mua recipe schema alternate"
        )


@recipe_app.command("cp")
def cp_cmd(
    name: str = typer.Argument(..., help="Shipped recipe name or path."),
    dest: str = typer.Argument(..., help="Where to write the copy."),
    force: bool = typer.Option(False, "--force", help="Overwrite an existing file."),
) -> None:
    """Copy a shipped recipe to edit it.

    Example: mua recipe cp tau_grpo my_tau.yaml
    """
    from mua.errors import UsageError

    src = _find(name)
    out = Path(dest)
    if out.exists() and not force:
        raise UsageError(f"{dest} exists; pass --force to overwrite")
    out.write_text(src.read_text())
    typer.echo(f"wrote {out}")


def register(app: typer.Typer) -> None:
    app.add_typer(recipe_app, name="recipe")
