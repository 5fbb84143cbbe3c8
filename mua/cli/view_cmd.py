"""`mua view`: write one self-contained HTML page over the transcripts of runs and evaluations.

The work is in `mua.view`; this module parses arguments and says where the page is.
"""

from __future__ import annotations

import typer

from mua.cli.common import out_option

PAGE_NAME = "view.html"  # the page's name in a folder given as (or defaulting to) the output

HELP = """Write one HTML page (no server needed) over a run's sampled transcripts.

Give a training run dir, an evaluation folder, or a folder holding several (two levels deep):
steps and evaluations, filters by reward, termination reason and gym, trained tokens marked,
two checkpoints side by side, and the run's reward curves. Open the page in a browser.

  mua view runs/quickstart

  mua view runs/quickstart runs/quickstart_eval --out runs/quickstart/view.html

A file at the page's path that mua did not write is never replaced (one line, exit 2).
"""


def register(app: typer.Typer) -> None:
    @app.command("view", help=HELP)
    def view(
        runs: list[str] = typer.Argument(
            ..., help="Run dirs, evaluation folders, or folders of them."
        ),
        out: str | None = out_option(
            "The page's path, or a folder for view.html (default: <first folder>/view.html)."
        ),
    ) -> None:
        from pathlib import Path

        from mua.cli.common import console
        from mua.output_folders import claim_file
        from mua.view.page import is_view_page, write_page
        from mua.view.sources import load_view_data

        data = load_view_data(list(runs))
        path = Path(out) if out else Path(runs[0])
        if path.is_dir():
            path = path / PAGE_NAME
        path = claim_file(path, what="view page", ours=is_view_page)
        write_page(data, path, title=f"mua view · {', '.join(runs)}")
        console().print(
            f"wrote {path} ({len(data.records)} transcripts, {len(data.checkpoints)} checkpoints, "
            f"{len(data.curves)} run(s) with curves); open it in a browser",
            soft_wrap=True,
        )
