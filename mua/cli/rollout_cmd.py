"""`mua rollout`: run a policy (the model or the gym's scripted expert) on a gym's tasks and write
the trajectories as JSONL, optionally printing some conversations or writing an HTML page.

Each entry of the recipe's gyms (`gym:` is a one-entry list) gets its tasks from its own
`train_files`, else the rows of `data.train_files` (parquet from `mua prep`) naming its gym, else
the gym's built-in split (`mua.rollout.mixed`); all conversations run in one pool. The
resolved recipe is written to the run dir first, and the run dir is locked against a second
`mua rollout` while this one writes (`mua.output_folders.FolderLock`). No training happens here.
"""

from __future__ import annotations

import typer

from mua.cli.common import RECIPE_HELP

HELP = """Roll out a policy on a gym's tasks and write trajectories (JSONL).

The recipe is optional: key=value overrides alone describe a rollout (see `mua recipe schema rollout`).

Examples:

  mua rollout policy=expert gym.name=guess data.max_tasks=4 --show 2

  mua rollout recipes/quickstart_rollout.yaml policy=model model.path=tiny:qwen3-1m data.max_tasks=2 --html runs/rollout.html
"""


def _make_policy(recipe, gym, ctx):
    """(policy, async close function or None)."""
    from mua.rollout.policies import EnginePolicy, expert_policy

    if recipe.policy == "expert":
        return expert_policy(gym, ctx), None
    engine_kind = recipe.rollout.engine
    if engine_kind != "openai":  # the registry's engine: hf in process, a vLLM server, ...
        from mua.engines.registry import standalone_engine
        from mua.models import load_tokenizer

        tokenizer = load_tokenizer(recipe.model.tokenizer or recipe.model.path)
        engine = standalone_engine(recipe, recipe.model.path, tokenizer)
        return EnginePolicy.from_config(
            engine, recipe.rollout, recipe.model.tool_parser
        ), engine.close
    from mua.rollout.openai_policy import OpenAIPolicy

    agent = OpenAIPolicy.from_config(
        recipe.rollout, model=recipe.model.path, tool_parser=recipe.model.tool_parser
    )
    return agent.as_message_policy(), agent.aclose


def _write_jsonl(trajectories, path) -> None:
    import os
    from pathlib import Path

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    with open(tmp, "w", encoding="utf-8") as f:
        for traj in trajectories:
            f.write(traj.to_json() + "\n")
    os.replace(tmp, path)


def _summary_line(trajectories, output) -> str:
    from collections import Counter

    n = len(trajectories)
    mean = sum(t.reward for t in trajectories) / n
    reasons = ", ".join(
        f"{k} {v}" for k, v in Counter(t.termination for t in trajectories).most_common()
    )
    drift = sum(1 for t in trajectories if t.metrics.get("drift"))
    gyms = list(dict.fromkeys(t.gym for t in trajectories if t.gym))
    split = ""
    if len(gyms) > 1:
        means = []
        for gym in gyms:
            rewards = [t.reward for t in trajectories if t.gym == gym]
            means.append(f"{gym} {sum(rewards) / len(rewards):.3f}")
        split = " (" + ", ".join(means) + ")"
    return (
        f"{n} trajectories · mean reward {mean:.3f}{split} · {reasons} · drift {drift} · "
        f"wrote {output}"
    )


def run(args: list[str], show: int, html_path: str | None, full: bool = False) -> None:
    """`mua rollout` over the recipe's gyms (one, or several: `mua.rollout.mixed`)."""
    from pathlib import Path

    from mua.cli.common import load
    from mua.errors import UsageError
    from mua.gym.mix import check_gyms, with_entry_budgets
    from mua.models import load_tokenizer
    from mua.output_folders import FolderLock
    from mua.rollout.mixed import entry_rollout_tasks
    from mua.run import entry_runs
    from mua.run.preflight import preflight

    recipe = load(args, "rollout")
    check_gyms(recipe, "rollout")
    recipe.gyms = with_entry_budgets(recipe)  # each entry's budgets, in the resolved recipe
    runs = entry_runs(recipe)
    tasks_by_gym = entry_rollout_tasks(recipe)
    if not any(tasks_by_gym.values()):
        raise UsageError("no tasks to roll out; check data.train_files, split and data.max_tasks")
    tokenizer = load_tokenizer(recipe.model.tokenizer or recipe.model.path)
    run_dir = Path(recipe.run_dir)
    # one `mua rollout` per run dir at a time: two would mix their recipe and trajectories
    with FolderLock(run_dir, what="rollout run_dir", verb="mua rollout"):
        with preflight(recipe, "rollout"):
            _run_mixed_in(recipe, runs, tasks_by_gym, tokenizer, run_dir, show, html_path, full)


def _run_mixed_in(recipe, runs, tasks_by_gym, tokenizer, run_dir, show, html_path, full) -> None:
    import asyncio

    from mua.config import write_resolved
    from mua.rollout.mixed import mixed_rollouts
    from mua.rollout.policies import EnginePolicy, expert_policy
    from mua.rollout.progress import rollout_progress

    write_resolved(recipe, run_dir)
    output = recipe.output.replace("{run_dir}", str(run_dir))
    shared, close = (None, None)
    if recipe.policy == "model":
        shared, close = _make_policy(recipe, runs[0].spec, runs[0].ctx)

    def make_policy(run):
        if recipe.policy == "expert":
            return expert_policy(run.spec, run.ctx)
        if isinstance(shared, EnginePolicy):  # the entry's own sampling temperature
            return EnginePolicy.from_config(
                shared.engine, run.rollout_cfg, recipe.model.tool_parser
            )
        return shared

    async def collect(progress):
        try:
            return await mixed_rollouts(
                recipe, runs, tasks_by_gym, make_policy, tokenizer, progress
            )
        finally:
            if close is not None:
                await close()

    by_label = {run.label: run.n for run in runs}
    total = sum(len(ts) * by_label[label] for label, ts in tasks_by_gym.items())
    with rollout_progress(total) as progress:
        trajectories = asyncio.run(collect(progress))
    _report(trajectories, output, tokenizer, show, html_path, full)


def _report(trajectories, output, tokenizer, show, html_path, full) -> None:
    from mua.cli.common import console

    _write_jsonl(trajectories, output)
    out = console()
    if show:
        from mua.rollout.render import print_conversations

        print_conversations(trajectories, show, out, full=full)
    if html_path:
        from mua.rollout.render import write_html

        write_html(trajectories, html_path, tokenizer)
        out.print(f"wrote {html_path}")
    out.print(_summary_line(trajectories, output), soft_wrap=True)


def register(app: typer.Typer) -> None:
    @app.command("rollout", help=HELP)
    def rollout(
        args: list[str] = typer.Argument(..., help=RECIPE_HELP),
        show: int = typer.Option(
            0, "--show", help="Print this many conversations with roles and rewards."
        ),
        html: str | None = typer.Option(
            None, "--html", help="Also write an HTML page of the trajectories here."
        ),
        full: bool = typer.Option(
            False, "--full", help="With --show: print system prompts whole, not their first lines."
        ),
    ) -> None:
        run(list(args), show, html, full)
