"""Entry point of the `mua` console script: builds the Typer app and maps errors to exit codes.

Exit codes: 0 ok, 1 runtime failure, 2 usage or recipe error, 130 interrupted. A `MuaError`
prints one line (no traceback unless MUA_DEBUG=1); anything else is a bug and shows its
traceback only with MUA_DEBUG=1, otherwise one line asking for it.
"""

from __future__ import annotations

import os
import sys

import typer

from mua.cli import verbs

app = typer.Typer(
    name="mua",
    help="Train LLM agents with RL on multi-turn conversations with simulated users and tools.\n\n"
    "Every verb reads a YAML recipe plus key=value overrides, e.g.\n\n"
    "  mua train recipes/quickstart.yaml optim.lr=1e-4\n\n"
    "Start with `make demo`, then `mua recipe ls`.",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode="rich",
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)
verbs.register_all(app)


def _err(message: str) -> None:
    from rich.console import Console

    Console(stderr=True, highlight=False, soft_wrap=True).print(
        f"[bold red]error:[/] {message}", markup=True
    )


def main(argv: list[str] | None = None) -> int:
    from mua.errors import MuaError

    debug = os.environ.get("MUA_DEBUG") == "1"
    try:
        app(args=argv, standalone_mode=False)
        return 0
    except MuaError as e:
        if debug:
            raise
        for line in str(e).splitlines() or [type(e).__name__]:
            _err(_escape(line))
        sys.exit(e.exit_code)
    except KeyboardInterrupt:
        _err("interrupted")
        sys.exit(130)
    except SystemExit:
        raise
    except Exception as e:  # click's own usage errors come through here too
        import click

        if isinstance(e, click.exceptions.Abort):
            _err("interrupted")
            sys.exit(130)
        if isinstance(e, click.ClickException):
            if debug:
                raise
            e.show()
            sys.exit(2 if isinstance(e, click.UsageError) else 1)
        if debug:
            raise
        _err(_escape(f"{type(e).__name__}: {e} (set MUA_DEBUG=1 for the traceback)"))
        sys.exit(1)


def _escape(text: str) -> str:
    from rich.markup import escape

    return escape(text)


if __name__ == "__main__":
    main()
