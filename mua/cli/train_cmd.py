"""`mua train`: validate a recipe, write the resolved copy, and start torchrun (see mua.train.launcher)."""

from __future__ import annotations

import typer

from mua.cli.common import RECIPE_HELP


def register(app: typer.Typer) -> None:
    @app.command(
        "train",
        help="Train a policy (GRPO, PPO or SFT) under torchrun.\n\n"
        "  mua train recipes/quickstart.yaml total_steps=20\n\n"
        "  mua train recipes/quickstart.yaml --nproc-per-node 2\n\n"
        "  mua train recipes/quickstart.yaml --nnodes 2 --node-rank 0 --rdzv-endpoint 10.0.0.1:29500\n\n"
        "Resumes from the latest checkpoint in the run dir unless --no-resume; "
        "--resume-from global_step_N picks an earlier one (e.g. when the latest is damaged). "
        "Resuming with a changed recipe needs --allow-recipe-change. Ctrl-C exits 130; the same "
        "command resumes.",
    )
    def train(
        args: list[str] = typer.Argument(..., help=RECIPE_HELP),
        nproc_per_node: int = typer.Option(
            1, "--nproc-per-node", help="Processes (GPUs) per node."
        ),
        nnodes: int = typer.Option(1, "--nnodes", help="Number of nodes."),
        node_rank: int = typer.Option(0, "--node-rank", help="This node's rank (0..nnodes-1)."),
        rdzv_endpoint: str | None = typer.Option(
            None, "--rdzv-endpoint", help="HOST:PORT of node 0."
        ),
        resume: bool = typer.Option(
            True, "--resume/--no-resume", help="Resume from the latest checkpoint."
        ),
        resume_from: str | None = typer.Option(
            None,
            "--resume-from",
            help="Resume from this checkpoint (global_step_N of the run dir, or its path).",
        ),
        allow_recipe_change: bool = typer.Option(
            False,
            "--allow-recipe-change",
            help="Resume although the recipe differs from the run's (the changes are recorded).",
        ),
    ) -> None:
        from mua.cli.common import load
        from mua.train.launcher import launch

        recipe = load(args, "train")
        processes = dict(
            nproc_per_node=nproc_per_node,
            nnodes=nnodes,
            node_rank=node_rank,
            rdzv_endpoint=rdzv_endpoint,
        )
        if getattr(recipe, "alternate", None) is not None:
            from mua.train.alternate import run_alternation

            if not resume or resume_from or allow_recipe_change:
                from mua.errors import UsageError

                raise UsageError(
                    "an alternating recipe resumes each side itself; drop --no-resume, "
                    "--resume-from and --allow-recipe-change"
                )
            run_alternation(recipe, **processes)
            return
        launch(
            recipe,
            **processes,
            resume=resume,
            resume_from=resume_from,
            allow_recipe_change=allow_recipe_change,
        )
        if node_rank == 0:
            _print_where_to_look(recipe)


def _print_where_to_look(recipe) -> None:
    """After a finished run: the run dir, its final export, the MLflow UI command for its store
    (the one that works for this install) and, when it wrote transcripts, `mua view`."""
    from pathlib import Path

    from mua.cli.common import console
    from mua.track.console import mlflow_ui_command
    from mua.track.tracker import tracking_uri

    run_dir = Path(recipe.run_dir)
    con = console()
    final = run_dir / "hf" / "final"
    con.print(
        f"done: {run_dir}" + (f" · model: {final}" if final.is_dir() else ""),
        soft_wrap=True,
        markup=False,
    )
    ui = mlflow_ui_command(tracking_uri(recipe.track.mlflow_uri, run_dir))
    con.print(f"mlflow: {ui}", soft_wrap=True, markup=False)
    if (run_dir / "transcripts").is_dir():
        con.print(f"transcripts: mua view {run_dir}", soft_wrap=True, markup=False)
