"""Shared CLI pieces: recipe argument parsing, console, progress helpers, Ctrl-C.

Kept light: imports typer and rich lazily where possible; never torch.
"""

from __future__ import annotations

import signal
from pathlib import Path

from mua.terminal import is_tty  # noqa: F401 - the CLI modules import it from here

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


def out_option(help: str):
    """The `--out/-o PATH` option of the verbs that write beside their input unless told where
    (`mua merge`, `mua view`); `help` names the default. What may be written there is checked by
    `mua.output_folders` (`claim_dir`, `claim_file`) when the verb writes."""
    import typer

    return typer.Option(None, "--out", "-o", help=help)


def console(stderr: bool = False):
    from rich.console import Console

    return Console(stderr=stderr, highlight=False)


_interrupts = {"count": 0}


def watch_interrupts() -> None:
    """Make Ctrl-C raise KeyboardInterrupt wherever the main thread is, and remember it.

    `asyncio.run` would otherwise turn Ctrl-C into a cancellation of its main task, which code
    that waits on many tasks can absorb, and the verb then returned normally (exit 0). With a
    handler of our own in place, asyncio leaves SIGINT alone."""

    import threading

    def on_sigint(signum, frame):
        _interrupts["count"] += 1
        raise KeyboardInterrupt

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, on_sigint)


def was_interrupted() -> bool:
    return _interrupts["count"] > 0


def interrupt_message(argv: list[str]) -> str:
    """The line printed on Ctrl-C: how to resume where the verb can."""
    verb = next((a for a in argv if not a.startswith("-")), "")
    if verb in ("train", "eval"):
        return "interrupted; run the same command again to resume"
    return "interrupted"
