"""Entry point of the `mua` console script: builds the Typer app and maps errors to exit codes.

Exit codes: 0 ok, 1 runtime failure, 2 usage or recipe error, 130 interrupted. A `MuaError`
prints one line (no traceback unless MUA_DEBUG=1); a usage error of the command line itself (an
unknown option or verb) prints one line with a did-you-mean and exits 2; anything else is a bug
and shows its traceback only with MUA_DEBUG=1, otherwise one line asking for it.
Global options: `--version`, `-v/--verbose` (library warnings, MLflow and download logs; see
`mua.track.console.quiet_libraries`). Nothing here imports torch.
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
    "  mua train recipes/quickstart.yaml optim.lr=1e-4 run_dir=runs/quickstart_lr1e-4\n\n"
    "Start with `make demo`, then `mua recipe ls`.",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode="rich",
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _show_version(value: bool) -> None:
    if value:
        from mua import __version__

        typer.echo(f"mua {__version__}")
        raise typer.Exit(0)


@app.callback()
def _global_options(
    version: bool = typer.Option(
        False,
        "--version",
        callback=_show_version,
        is_eager=True,
        help="Print mua's version and exit.",
    ),
    verbose: bool = typer.Option(
        False,
        "--verbose",
        "-v",
        help="Also show library warnings, MLflow's log lines and download/save progress bars.",
    ),
) -> None:
    from mua.track.console import quiet_libraries

    if verbose:
        os.environ["MUA_VERBOSE"] = "1"  # the ranks torchrun starts inherit it
    quiet_libraries()


verbs.register_all(app)


def reflow_help(text: str | None) -> str | None:
    """A verb's help with each prose paragraph on one line, so the terminal wraps it at its own
    width; indented lines (examples) stay as written, in colour. The colour tag also keeps their
    indentation: typer dedents the help by the indentation its lines share."""
    if not text:
        return text
    out: list[str] = []
    for line in text.splitlines():
        if line.startswith(" ") and line.strip():
            out.append(f"[cyan]{line}[/cyan]")
        elif line.strip() and out and out[-1].strip() and not out[-1].startswith("[cyan]"):
            out[-1] = f"{out[-1]} {line.strip()}"
        else:
            out.append(line)
    return "\n".join(out)


for _command in app.registered_commands:
    _command.help = reflow_help(_command.help)


def _err(message: str) -> None:
    from rich.console import Console

    Console(stderr=True, highlight=False, soft_wrap=True).print(
        f"[bold red]error:[/] {message}", markup=True
    )


def _is_cli_exception(err: BaseException, name: str) -> bool:
    """True for the command-line parser's own exception classes (click's, or typer's vendored
    copy of them, depending on the installed typer)."""
    return any(
        cls.__name__ == name and cls.__module__.split(".")[0] in ("click", "typer")
        for cls in type(err).__mro__
    )


def usage_line(err) -> str:
    """One line for a command-line usage error: the problem, a did-you-mean, where help is."""
    message = " ".join(err.format_message().split())
    possibilities = sorted(getattr(err, "possibilities", None) or [])
    option = getattr(err, "option_name", None)
    if option and possibilities:  # the parser's own wording varies between versions
        message = f"No such option: {option}; did you mean {' or '.join(possibilities[:3])}?"
    ctx = getattr(err, "ctx", None)
    path = ctx.command_path if ctx is not None else "mua"
    return f"{message} (see `{path} --help`)"


def main(argv: list[str] | None = None) -> int:
    from mua.cli.common import interrupt_message, was_interrupted, watch_interrupts
    from mua.errors import MuaError

    debug = os.environ.get("MUA_DEBUG") == "1"
    argv = sys.argv[1:] if argv is None else argv
    watch_interrupts()
    try:
        app(args=argv, standalone_mode=False)
        if was_interrupted():  # a Ctrl-C absorbed on the way out still ends with 130
            raise KeyboardInterrupt
        return 0
    except MuaError as e:
        if debug:
            raise
        for line in str(e).splitlines() or [type(e).__name__]:
            _err(_escape(line))
        sys.exit(e.exit_code)
    except KeyboardInterrupt:
        _err(interrupt_message(argv))
        sys.exit(130)
    except SystemExit:
        raise
    except Exception as e:  # the command-line parser's own errors come through here too
        if _is_cli_exception(e, "Abort"):
            _err(interrupt_message(argv))
            sys.exit(130)
        if _is_cli_exception(e, "ClickException"):
            if debug:
                raise
            if _is_cli_exception(e, "UsageError"):
                _err(_escape(usage_line(e)))
                sys.exit(2)
            _err(_escape(" ".join(e.format_message().split())))
            sys.exit(getattr(e, "exit_code", 1) or 1)
        if debug:
            raise
        _err(_escape(f"{type(e).__name__}: {e} (set MUA_DEBUG=1 for the traceback)"))
        sys.exit(1)


def _escape(text: str) -> str:
    from rich.markup import escape

    return escape(text)


if __name__ == "__main__":
    main()
