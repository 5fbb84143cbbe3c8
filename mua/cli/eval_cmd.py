"""`mua eval`: evaluate a model (or an API agent, or a gym's expert) on held-out tasks of gyms.

Flags become recipe overrides (`--model` -> model.path, `-n` -> eval.n, `--max-tasks` ->
eval.max_tasks, `--temperature` -> eval.temperature, `--user` -> user.kind,
`--exclude-user-failures` / `--audit-users` -> the eval keys of the same names), so a recipe and
flags combine and are validated the same way. With `eval.users` the table is gym × user
(`mua.users.matrix`). The work is in `mua.eval.session`; this module parses
arguments and prints the table and where the outputs are.
"""

from __future__ import annotations

import re
from pathlib import Path

import typer

HELP = """Evaluate a model on gyms' held-out tasks: a table, results.jsonl, summary.json and an MLflow run.

--model: tiny:<preset>, a Hugging Face folder, a training run or checkpoint (merged first),
openai:<name> (any OpenAI-compatible endpoint: rollout.openai.base_url or $OPENAI_BASE_URL),
or expert; none: the final model of the newest finished training run under ./runs. --gym replaces the recipe's gym (or gyms); a gym the recipe has a section for keeps its
options.
Re-running the same command resumes an interrupted evaluation; a folder evaluated with other
settings (a gym entry's included) is refused, naming them (--fresh starts over).

  mua eval --gym travel

  mua eval --gym travel --model runs/quickstart/hf/final

  mua eval --gym all --model tiny:qwen3-1m -n 4 --max-tasks 8

  mua eval --gym tau --model openai:gpt-4o --user llm user.model=gpt-4o-mini

  mua eval recipes/quickstart_eval.yaml model.path=runs/quickstart_sft/hf/final --out runs/quickstart_sft_eval

  mua eval recipes/eval_user_matrix.yaml --exclude-user-failures   (eval.users: a gym × user table)
"""


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text.strip("/")).strip("_")[-80:] or "model"


def newest_final_model(runs_root: Path = Path("runs")) -> Path | None:
    """The final model of the training run under `runs_root` that finished last, if any: the
    `hf/final` folder whose `merge_info.json` (written last by the export) is newest."""
    finished = [p.parent for p in runs_root.glob("*/hf/final/merge_info.json")]
    return max(finished, key=lambda p: (p / "merge_info.json").stat().st_mtime, default=None)


def model_from_recipe(path: str | None, overrides: list[str]) -> bool:
    """Whether the recipe file or an override names the model."""
    from mua.config.recipe_loading import read_yaml

    if any(o.split("=", 1)[0] == "model.path" for o in overrides):
        return True
    raw = read_yaml(path) if path else {}
    return isinstance(raw.get("model"), dict) and bool(raw["model"].get("path"))


def default_model() -> str:
    """With no model named: the newest finished training run's final model under ./runs (never the
    schema's default model: nobody asked for a score of it)."""
    from mua.errors import UsageError

    final = newest_final_model()
    if final is None:
        raise UsageError(
            "say what to evaluate: no finished training run under ./runs (none has hf/final); "
            "--model tiny:qwen3-1m, a Hugging Face folder, a training run, openai:<name> or expert "
            "(or a recipe that sets model.path)"
        )
    from mua.cli.common import console

    console().print(
        f"no --model given: evaluating {final}, the final model of the newest finished training "
        "run under ./runs; pick another with --model PATH",
        soft_wrap=True,
        markup=False,
    )
    return str(final)


def build_recipe(
    args: list[str],
    *,
    model,
    gyms,
    user,
    n,
    max_tasks,
    temperature,
    exclude_user_failures=None,
    audit_users=None,
):
    """The EvalRecipe from an optional recipe file, its key=value overrides, then the flags."""
    from mua.cli.common import split_recipe_args
    from mua.config import load_recipe
    from mua.errors import UsageError

    path, overrides = split_recipe_args(args)
    if model is None and not model_from_recipe(path, overrides):
        model = default_model()
    flags = {
        "model.path": model,
        "eval.n": n,
        "eval.max_tasks": max_tasks,
        "eval.temperature": temperature,
        "eval.exclude_user_failures": exclude_user_failures or None,
        "eval.audit_users": audit_users or None,
    }
    kind = (
        [f"user.kind={user}"] if user is not None else []
    )  # first: it decides which user.* keys exist
    overrides = (
        kind + overrides + [f"{key}={value}" for key, value in flags.items() if value is not None]
    )
    names = None
    if gyms:  # --gym replaces the recipe's choice; a gym the recipe has a section for keeps it
        names = [name.strip() for item in gyms for name in item.split(",") if name.strip()]
        if not names:
            raise UsageError("--gym: no gym named; pass --gym NAME (or --gym all)")
        names = list(dict.fromkeys(names))
    # the gyms are chosen before the overrides apply, so `gym.options.x=...` reaches them
    return load_recipe(path, overrides, verb="eval", gyms=names), path


def _ends(summary: dict, *, excluded_only: bool) -> str:
    """`user_failure 2, done 1`: a summary's termination counts (only the unscored ones)."""
    from mua.eval.summary import EXCLUDED_TERMINATIONS

    return ", ".join(
        f"{reason} {count}"
        for reason, count in summary["terminations"].items()
        if count and (reason in EXCLUDED_TERMINATIONS or not excluded_only)
    )


def nothing_scored(summaries: dict[str, dict], out_dir) -> str | None:
    """The one line for an evaluation in which no trajectory could be scored, else None."""
    if any(s["num_trajectories"] - s["excluded"] > 0 for s in summaries.values()):
        return None
    total = sum(s["num_trajectories"] for s in summaries.values())
    ends = "; ".join(f"{gym}: {_ends(s, excluded_only=False)}" for gym, s in summaries.items())
    detail = next(
        (s["excluded_detail"] for s in summaries.values() if s.get("excluded_detail")), ""
    )
    why = f" (first failure: {detail})" if detail else ""
    return (
        f"nothing could be scored: all {total} trajectories ended without a score ({ends}){why}; "
        f"fix the user or judge endpoint and re-run the same command to retry them (kept in {out_dir})"
    )


def result_notes(summaries: dict[str, dict]) -> list[str]:
    """Lines printed under the table: the macro average of several gyms (or why there is none),
    and each gym's trajectories that were not scored (its reward is over the scored ones only)."""
    from mua.eval.report import macro_average, macro_blocked, macro_cells, unscored

    notes = []
    macro, blocked = macro_average(summaries), macro_blocked(summaries)
    if blocked:
        notes.append(f"no macro average: nothing scored on {', '.join(blocked)}")
    elif "reward_mean" in macro and "success_rate" in macro:
        notes.append(
            f"macro average over {len(macro_cells(summaries))} gyms (unweighted mean of each gym's mean; "
            f"every gym counts the same whatever its task count): reward "
            f"{macro['reward_mean']:.3f} · success {macro['success_rate']:.3f}"
        )
    partial = False
    for gym, s in summaries.items():
        if not s["excluded"]:
            continue
        partial = True
        ends = _ends(s, excluded_only=True)
        if gym in unscored(summaries):
            notes.append(f"{gym}: nothing scored ({ends})")
        else:
            notes.append(
                f"{gym}: {s['excluded']} of {s['num_trajectories']} trajectories not scored "
                f"({ends}); its reward and success are over the other "
                f"{s['num_trajectories'] - s['excluded']}"
            )
    if partial:
        notes.append(
            "the user or judge failed on those trajectories; re-run the same command to retry them"
        )
    return notes


def not_run_notes(not_run: dict[str, str] | None) -> list[str]:
    """One line per `eval.users` entry left out: its label and why."""
    return [
        f"user {label} not run (its cells are marked `not run`): {why}; fix its eval.users "
        "entry and re-run the same command to evaluate it"
        for label, why in (not_run or {}).items()
    ]


def users_not_run(not_run: dict[str, str] | None, out_dir) -> None:
    """Exit 1 (`RunFailure`, one line) once everything is printed when a matrix user was left
    out: the other cells' results are kept, but the evaluation is not the one asked for."""
    from mua.errors import RunFailure

    if not_run:
        raise RunFailure(
            f"{len(not_run)} eval.users entr{'y' if len(not_run) == 1 else 'ies'} not run "
            f"({', '.join(not_run)}: see above); the other cells were evaluated (results in "
            f"{out_dir})"
        )


def show_results(summaries, meta: dict, out_dir) -> None:
    """Print the evaluation's tables, notes and where its files are; exit 1 (`RunFailure`, one
    line) when nothing was scored or a matrix user was left out."""
    from mua.cli.common import console, is_tty
    from mua.eval.report import audit_table, blame_table, summary_table, user_matrix_table

    failed = nothing_scored(summaries, out_dir)
    if failed:
        from mua.errors import RunFailure

        raise RunFailure(failed)
    con = console()
    if not is_tty():
        con.width = max(con.width, 160)  # a log file has room for the whole table
    title = f"mua eval · {meta['model']} · n={meta['n']} · T={meta['temperature']:g}"
    con.print(summary_table(summaries, title))
    if meta.get("user_matrix"):
        matrix, not_run = meta["user_matrix"], meta["users_not_run"]
        con.print(user_matrix_table(summaries, matrix, "simulated users", not_run))
    else:
        con.print(blame_table(summaries))
    if meta.get("user_audit") is not None:
        con.print(audit_table(meta["user_audit"]))
        con.print(
            f"simulator audit: {out_dir}/user_audit.json (worst examples; mua view {out_dir})",
            soft_wrap=True,
            markup=False,
        )
    for note in [*result_notes(summaries), *not_run_notes(meta.get("users_not_run"))]:
        con.print(note, soft_wrap=True, markup=False)
    for note in (note for lines in meta["notes"].values() for note in lines):
        con.print(note, soft_wrap=True, markup=False)
    resumed = [
        f"{meta['resumed_rows']} trajectories were already done" if meta["resumed_rows"] else "",
        f"{meta['retried_rows']} not scored before were retried"
        if meta.get("retried_rows")
        else "",
    ]
    resumed = "; ".join(r for r in resumed if r)
    resumed = f" (resumed: {resumed})" if resumed else ""
    con.print(f"results: {out_dir}/results.jsonl, {out_dir}/summary.json{resumed}", soft_wrap=True)
    if meta.get("mlflow_uri"):
        from mua.track.console import mlflow_ui_command

        ui = mlflow_ui_command(meta["mlflow_uri"])
        con.print(f"mlflow: {ui}", soft_wrap=True, markup=False)
    users_not_run(meta.get("users_not_run"), out_dir)


OUT_OPTION = typer.Option(
    None,
    "--out",
    "-o",
    help="Output folder (default: the recipe's run_dir, else runs/eval/<model>).",
)
FRESH_OPTION = typer.Option(
    False,
    "--fresh",
    help="Discard earlier results in the output folder (to evaluate it again with other settings).",
)
EXCLUDE_USER_FAILURES_OPTION = typer.Option(
    False,
    "--exclude-user-failures",
    help="Also report pass^k without the failures blamed on the simulated user (beside the raw "
    "numbers).",
)
AUDIT_USERS_OPTION = typer.Option(
    False,
    "--audit-users",
    help="Audit the simulated users' turns on sampled conversations (user_audit.json).",
)


def register(app: typer.Typer) -> None:
    @app.command("eval", help=HELP)
    def eval_(
        args: list[str] | None = typer.Argument(
            None, help="Optional recipe file, then key=value overrides."
        ),
        gym: list[str] | None = typer.Option(
            None, "--gym", "-g", help="Gym to evaluate (repeat, comma-separate, or `all`)."
        ),
        model: str | None = typer.Option(
            None, "--model", "-m", help="What to evaluate (see above)."
        ),
        user: str | None = typer.Option(
            None, "--user", help="Simulated user: scripted or llm (user.* overrides)."
        ),
        n: int | None = typer.Option(
            None, "-n", help="Samples per task (pass@k/pass^k use k <= n)."
        ),
        max_tasks: int | None = typer.Option(
            None, "--max-tasks", help="Evaluate at most N tasks per gym."
        ),
        temperature: float | None = typer.Option(
            None, "--temperature", help="Sampling temperature (0: greedy)."
        ),
        out: str | None = OUT_OPTION,
        fresh: bool = FRESH_OPTION,
        mlflow: bool = typer.Option(True, "--mlflow/--no-mlflow", help="Log an MLflow run."),
        exclude_user_failures: bool = EXCLUDE_USER_FAILURES_OPTION,
        audit_users: bool = AUDIT_USERS_OPTION,
    ) -> None:
        from mua.cli.common import console
        from mua.eval.session import run_evaluation

        recipe, path = build_recipe(
            list(args or []),
            model=model,
            gyms=gym,
            user=user,
            n=n,
            max_tasks=max_tasks,
            temperature=temperature,
            exclude_user_failures=exclude_user_failures,
            audit_users=audit_users,
        )
        out_dir = out or (recipe.run_dir if path else f"runs/eval/{_slug(recipe.model.path)}")
        gyms = [section.key for section in recipe.gym_sections()]
        console().print(
            f"evaluating {recipe.model.path} on {', '.join(gyms)} "
            f"(n={recipe.eval.n}, T={recipe.eval.temperature:g})",
            soft_wrap=True,
        )
        summaries, meta = run_evaluation(
            recipe,
            model=recipe.model.path,
            gyms=gyms,
            out_dir=out_dir,
            fresh=fresh,
            track=mlflow,
        )
        show_results(summaries, meta, out_dir)
