"""`mua merge`: convert training checkpoints into Hugging Face folders (work in `mua.models.merge`).

Forms:
  mua merge RUN_DIR | RUN_DIR/checkpoints | RUN_DIR/checkpoints/global_step_N  [--out DIR]
            [--dtype float32|bfloat16|float16] [--step N] [--force] [--verify]
            [--adapter] [--base MODEL]      (LoRA checkpoints: PEFT folder; base model)
  mua merge recipes/merge.yaml [k=v ...]          (a MergeRecipe)
Shows a progress bar over steps on a terminal (one line per step otherwise) and a table at the end.
"""

from __future__ import annotations

from pathlib import Path

import typer

from mua.cli.common import out_option

HELP = """Convert distributed checkpoints into Hugging Face folders (safetensors, config, tokenizer).

Every global_step_N under the folder is merged into <run>/hf/global_step_N unless --step picks one;
steps already merged (same dtype, same checkpoint files) are skipped unless --force. An existing
output folder that mua did not write is never replaced (one line, exit 2).

  mua merge runs/quickstart

  mua merge runs/quickstart/checkpoints --dtype bfloat16 --verify --out runs/quickstart/hf_bf16

  mua merge recipes/merge.yaml checkpoint_dir=runs/quickstart/checkpoints

A LoRA checkpoint (adapters only) is merged into its base model (named in the checkpoint;
--base when it moved); --adapter writes a PEFT adapter folder instead (peft.PeftModel.from_pretrained).

  mua merge runs/quickstart_lora --adapter --verify --out runs/quickstart_lora/adapter
"""


def _settings(args: list[str], out, dtype, force, verify):
    """A MergeRecipe from a recipe file or from a checkpoint path; flags override either."""
    from mua.cli.common import load
    from mua.config.recipes import MergeRecipe
    from mua.errors import UsageError

    first = args[0] if args else None
    if first is None:
        raise UsageError(
            "give a checkpoint folder (e.g. `mua merge runs/quickstart`) or a merge recipe"
        )
    if Path(first).suffix in (".yaml", ".yml"):
        recipe = load(args, "merge")
    else:
        if len(args) > 1:
            raise UsageError(
                f"unexpected argument {args[1]!r}: give one checkpoint folder, then options"
            )
        recipe = MergeRecipe(checkpoint_dir=first)
    if dtype is not None and dtype not in ("float32", "bfloat16", "float16"):
        raise UsageError(f"--dtype {dtype}: use float32, bfloat16 or float16")
    return recipe.model_copy(
        update={
            "out_dir": out if out is not None else recipe.out_dir,
            "dtype": dtype or recipe.dtype,
            "force": force or recipe.force,
            "verify": verify or recipe.verify,
        }
    )


def _print_table(results) -> None:
    from rich.table import Table

    from mua.cli.common import console

    table = Table("step", "status", "seconds", "max |logit diff|", "folder", title="mua merge")
    for r in results:
        done = "adapter written" if r.info.get("form") == "adapter" else "merged"
        status = "skipped (merged)" if r.skipped else done
        diff = "" if r.max_logit_diff is None else f"{r.max_logit_diff:.2e}"
        table.add_row(
            str(r.step), status, "" if r.skipped else f"{r.seconds:.1f}", diff, str(r.out_dir)
        )
    console().print(table)


def run_merge(
    recipe, step: int | None = None, adapter: bool = False, base: str | None = None
) -> list:
    from transformers.utils import logging as hf_logging

    from mua.cli.common import console, is_tty
    from mua.errors import UsageError
    from mua.models.merge import default_out_dir, find_checkpoints
    from mua.models.merge_checkpoint import merge_checkpoint

    hf_logging.disable_progress_bar()  # one bar over steps, not one per file
    found = find_checkpoints(recipe.checkpoint_dir)
    if step is not None:
        found = [(s, p) for s, p in found if s == step]
        if not found:
            raise UsageError(f"--step {step}: no global_step_{step} under {recipe.checkpoint_dir}")
    results = []
    show_bar = is_tty()
    if show_bar:
        from rich.progress import Progress

        progress = Progress(console=console())
        progress.start()
        task = progress.add_task("merging", total=len(found))
    try:
        for s, path in found:
            out = default_out_dir(path, recipe.out_dir)
            result = merge_checkpoint(
                s,
                path,
                out,
                dtype=recipe.dtype,
                force=recipe.force,
                verify=recipe.verify,
                adapter=adapter,
                base=base,
            )
            results.append(result)
            if show_bar:
                progress.advance(task)
            else:
                what = (
                    "skipped, already merged"
                    if result.skipped
                    else f"merged in {result.seconds:.1f}s"
                )
                print(f"step {s}: {what} -> {out}", flush=True)
    finally:
        if show_bar:
            progress.stop()
    return results


def register(app: typer.Typer) -> None:
    @app.command("merge", help=HELP)
    def merge(
        args: list[str] = typer.Argument(
            ..., help="Checkpoint folder, or a merge recipe then key=value overrides."
        ),
        out: str | None = out_option("Folder for the HF folders (default <run>/hf)."),
        dtype: str | None = typer.Option(
            None, "--dtype", help="float32 (default), bfloat16 or float16."
        ),
        step: int | None = typer.Option(None, "--step", help="Merge only global_step_STEP."),
        force: bool = typer.Option(
            False, "--force", help="Re-merge steps that were merged already."
        ),
        verify: bool = typer.Option(
            False, "--verify", help="Compare logits with the checkpoint's on a probe batch."
        ),
        adapter: bool = typer.Option(
            False, "--adapter", help="LoRA checkpoints: write a PEFT adapter folder, not merged."
        ),
        base: str | None = typer.Option(
            None, "--base", help="LoRA checkpoints: the base model (default: the one it names)."
        ),
    ) -> None:
        recipe = _settings(args, out, dtype, force, verify)
        _print_table(run_merge(recipe, step, adapter=adapter, base=base))
