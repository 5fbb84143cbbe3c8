"""`mua prep`: write a gym's tasks as parquet split files, or list gyms.

Forms:
  mua prep --gym NAME [--source PATH] [--out DIR] [--seed S] [--option k=v ...]
  mua prep RECIPE.yaml [k=v ...]           (a PrepRecipe)
  mua prep --list
Gyms are mixed where they are used, by a recipe's `gyms:` list (with weights), not in files.
The work is in `mua.gym.prep`; this module parses arguments and prints a table of what it wrote.
"""

from __future__ import annotations

from pathlib import Path

import typer

HELP = """Write a gym's tasks to <out>/<split>.parquet, or list gyms. To train or evaluate on several
gyms, list them in a recipe's `gyms:` (each with its files and weight).

Examples:

  mua prep --gym travel --option num_train=200

  mua prep --gym math --source limo.jsonl --out data/limo

  mua prep --list
"""


def _print_written(gym: str, written: dict) -> None:
    from rich.table import Table

    from mua.cli.common import console

    table = Table("split", "rows", "file", title=f"{gym} tasks")
    for split, (path, count) in written.items():
        table.add_row(split, str(count), str(path))
    console().print(table)


def _list_gyms() -> None:
    from rich.table import Table

    from mua.cli.common import console
    from mua.gym.registry import get_gym, list_gyms

    table = Table("gym", "description")
    for name in list_gyms():
        try:
            description = get_gym(name).description
        except Exception as e:  # one broken gym must not hide the others
            description = f"(cannot be imported: {type(e).__name__}: {e})"
        table.add_row(name, description)
    console().print(table)


def _build(gym: str, source: str | None, out: str | None, seed: int, options: dict) -> None:
    from mua.gym.prep import build_and_write

    out_dir = out or str(Path("data") / gym)
    _print_written(gym, build_and_write(gym, out_dir, source=source, seed=seed, options=options))


def _from_recipe(args: list[str], gym, source, out, seed, options) -> None:
    from mua.cli.common import load

    recipe = load(args, "prep")
    seed = recipe.seed if seed is None else seed
    gym = gym or recipe.gym.name
    recipe_options = recipe.gym.options if gym == recipe.gym.name else {}
    _build(
        gym,
        source or recipe.source,
        out or recipe.out.replace("{gym}", gym),
        seed,
        {**recipe_options, **options},
    )


def register(app: typer.Typer) -> None:
    @app.command("prep", help=HELP)
    def prep(
        args: list[str] | None = typer.Argument(
            None, help="A prep recipe file, then key=value overrides."
        ),
        gym: str | None = typer.Option(
            None, "--gym", "-g", help="Gym whose tasks to write (see --list)."
        ),
        source: str | None = typer.Option(
            None, "--source", help="Public data file or folder; default: the built-in dataset."
        ),
        out: str | None = typer.Option(None, "--out", help="Output folder (default data/<gym>)."),
        seed: int | None = typer.Option(
            None, "--seed", help="Seed for generation and splits (default 0)."
        ),
        option: list[str] | None = typer.Option(
            None, "--option", "-o", help="Gym prep option key=value (repeatable)."
        ),
        list_gyms: bool = typer.Option(False, "--list", help="List gyms with their descriptions."),
    ) -> None:
        from mua.errors import UsageError
        from mua.gym.prep import parse_option_args

        args = list(args or [])
        if list_gyms:
            _list_gyms()
            return
        options = parse_option_args(list(option or []))
        if args and args[0] == "mix":
            raise UsageError(
                "`mua prep mix` is gone: list the gyms in a recipe's `gyms:` instead, each with "
                "its task files and a weight (see docs/multi_gym.md)"
            )
        if args:
            _from_recipe(args, gym, source, out, seed, options)
        elif gym:
            _build(gym, source, out, seed or 0, options)
        else:
            raise UsageError(
                "mua prep: give --gym NAME (see `mua prep --list`) or a prep recipe file"
            )
