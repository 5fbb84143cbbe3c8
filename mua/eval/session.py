"""One `mua eval` run: resolve the agent, load tasks, evaluate every gym resumably, report.

`run_evaluation(recipe, model=..., gyms=..., out_dir=...)` writes `results.jsonl`, `summary.json`
and `eval_config.json` in a folder it may claim and locks, logs an MLflow run unless `track` is
False, and returns the per-gym summaries. A rerun resumes when settings, model, tokenizer and
tasks are unchanged (docs/eval.md); an `eval.users` cell whose endpoint fails its preflight is left
out (`users_not_run`). Not here: parsing arguments, printing the table.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from mua.config.resolved import RESOLVED_NAME
from mua.eval.blame import write_blame
from mua.eval.report import log_mlflow, write_summary
from mua.eval.store import CONFIG_FILE, ResultStore
from mua.users.matrix import matrix_summary

HASH_CACHE_FILE = "content_hashes.json"
# files showing that an older mua, before the folder marker existed, wrote an output folder
LEGACY_PROOF = (CONFIG_FILE, RESOLVED_NAME)


async def _evaluate_all(agent, cells, tasks_by_gym, recipe, store, progress, on_row, out_dir):
    """Every cell evaluated in turn, then its failures blamed: (summaries, verdicts) by cell."""
    from mua.eval.blame import BlameJudge, blame_rows, blame_summary, without_user_failures
    from mua.eval.eval_runner import evaluate
    from mua.llm.llm_client import user_call_report
    from mua.run import entry_run
    from mua.users.matrix import inner_client, with_persona

    summaries, verdicts_by_cell, rows_by_cell = {}, {}, {}
    judge = BlameJudge(recipe.eval.blame_judge, out_dir) if recipe.eval.blame_judge else None
    try:
        for cell in cells:
            run = entry_run(recipe, cell.entry)
            if cell.user is not None:
                with_persona(run, cell.user)
            spec, ctx = run.spec, run.ctx
            tasks = tasks_by_gym[cell.gym]
            result = await evaluate(
                tasks,
                policy=agent.make_policy(spec, ctx),
                tokenizer=agent.tokenizer,
                run=run,
                n=recipe.eval.n,
                k_values=recipe.eval.k,
                success_threshold=recipe.eval.success_threshold,
                store=store,
                progress=progress,
                on_row=on_row,
                label=cell.label,
            )
            # retries, 429s and timeouts of the LLM user (this session's requests)
            summary = {**result.summary, **user_call_report(inner_client(ctx.llm))}
            if ctx.llm is not None:
                await inner_client(ctx.llm).aclose()
            payloads = {str(t.task_id): t.payload for t in tasks}
            verdicts = await blame_rows(result.rows, payloads, judge)
            summary["blame"] = blame_summary(result.rows, verdicts)
            if recipe.eval.exclude_user_failures:
                k_all = sorted(
                    {k for k in (*recipe.eval.k, 1, recipe.eval.n) if 1 <= k <= recipe.eval.n}
                )
                order = [str(t.task_id) for t in tasks]
                summary["without_user_failures"] = without_user_failures(
                    result.rows, verdicts, k_all, order
                )
            summaries[cell.label] = summary
            verdicts_by_cell[cell.label] = verdicts
            rows_by_cell[cell.label] = result.rows
    finally:
        if judge is not None:
            await judge.aclose()
        if agent.close is not None:
            await agent.close()
            await asyncio.sleep(0)  # let a cancelled engine scheduler finish before the loop closes
    return summaries, verdicts_by_cell, rows_by_cell


def run_evaluation(
    recipe,
    *,
    model: str,
    gyms: list[str],
    out_dir: str | Path,
    fresh: bool = False,
    track: bool = True,
    on_row=None,
) -> tuple[dict, dict]:
    """Evaluate `model` on `gyms`; returns (summaries by gym, meta: model, out_dir, times, mlflow uri)."""
    from mua.eval.tasks import load_eval_tasks
    from mua.gym.mix import check_gyms
    from mua.llm.llm_client import preflight_user
    from mua.output_folders import FolderLock, claim_dir
    from mua.run.preflight import served_folders
    from mua.run.spec import run_spec
    from mua.serve.checkpoints import serving
    from mua.users.matrix import eval_cells

    check_gyms(recipe, "eval")
    tasks_by_gym = load_eval_tasks(recipe, gyms)
    cells = eval_cells(recipe, list(tasks_by_gym))
    specs = {cell.label: run_spec(recipe, cell.entry, cell.label) for cell in cells}
    # users, agents and judges named by a local checkpoint, served while the evaluation runs
    with serving(served_folders(specs.values(), recipe.eval.blame_judge)):
        # a wrong key or model (the recipe's user's or a judge's) stops here, before anything
        # is written; an `eval.users` entry's only leaves that user's cells out
        cells, not_run = preflight_cells(cells, specs)
        if recipe.eval.blame_judge is not None:
            preflight_user(recipe.eval.blame_judge, "blame judge", "eval.blame_judge.base_url")
        out_dir = claim_dir(out_dir, what="eval output folder", legacy_proof=LEGACY_PROOF)
        # one `mua eval` per folder at a time: two would mix their rows under one summary
        with FolderLock(out_dir, what="eval output folder", verb="mua eval"):
            return _evaluate_into(
                recipe, model, tasks_by_gym, cells, specs, out_dir, fresh, track, on_row, not_run
            )


def preflight_cells(cells, specs: dict) -> tuple[list, dict[str, str]]:
    """One request to every endpoint the cells' specs call (`mua.run.preflight`). The recipe's
    own user's cells (all of a plain evaluation's) stop the run when one fails; an `eval.users`
    entry whose endpoint fails is left out: returns (the cells to run, {label of each user left
    out: why, one line})."""
    from mua.errors import RunFailure
    from mua.run.preflight import ask_endpoints

    def held_out(cell) -> bool:
        return cell.user is not None and not cell.user.trained

    ask_endpoints([specs[cell.label] for cell in cells if not held_out(cell)])
    not_run: dict[str, str] = {}
    for label in dict.fromkeys(cell.user.label for cell in cells if held_out(cell)):
        group = [specs[c.label] for c in cells if held_out(c) and c.user.label == label]
        try:
            ask_endpoints(group)
        except RunFailure as err:
            not_run[label] = str(err)
    kept = [cell for cell in cells if not (held_out(cell) and cell.user.label in not_run)]
    return kept, not_run


def _evaluate_into(
    recipe, model, tasks_by_gym: dict, cells, specs, out_dir: Path, fresh, track, on_row, not_run
):
    """`run_evaluation`'s work once the folder is claimed and locked (`not_run`: the matrix
    users left out, kept in the meta as `users_not_run`)."""
    from mua.eval.agents import load_agent, model_source
    from mua.eval.fingerprint import HashCache, eval_fingerprint, task_digest
    from mua.rollout.progress import rollout_progress

    source = model_source(model, recipe)
    cache = HashCache(out_dir / HASH_CACHE_FILE)
    kept = {cell.label: specs[cell.label] for cell in cells}
    fingerprint = eval_fingerprint(recipe, model, source[0], cache, kept)
    cache.save()
    digests = {
        (cell.label, str(t.task_id)): task_digest(t)
        for cell in cells
        for t in tasks_by_gym[cell.gym]
    }
    store = ResultStore(out_dir, fingerprint, fresh=fresh, task_digests=digests)
    resumed = len(store.rows)
    t0 = time.perf_counter()
    total = sum(len(tasks_by_gym[cell.gym]) for cell in cells) * recipe.eval.n
    try:
        agent = load_agent(model, recipe, source)
        with rollout_progress(total, description="evaluating") as progress:
            summaries, verdicts, rows = asyncio.run(
                _evaluate_all(agent, cells, tasks_by_gym, recipe, store, progress, on_row, out_dir)
            )
    finally:
        store.close()
    write_blame(out_dir, verdicts)
    if recipe.eval.audit_users:
        from mua.eval.audit import audit_users, write_audit

        payloads = {(g, str(t.task_id)): t.payload for g, ts in tasks_by_gym.items() for t in ts}
        audit = audit_users(rows, payloads, recipe.eval.audit_samples, recipe.data.seed)
        write_audit(out_dir, audit)
    meta = {
        "model": agent.label,
        "model_dir": agent.model_dir,
        "n": recipe.eval.n,
        "temperature": recipe.eval.temperature,
        "out_dir": str(out_dir),
        "resumed_rows": resumed,
        "retried_rows": store.retried,
        "seconds": round(time.perf_counter() - t0, 2),
    }
    meta["notes"] = gym_notes(recipe, tasks_by_gym, out_dir)
    if recipe.eval.users:
        meta["user_matrix"] = matrix_summary(summaries)
        meta["users_not_run"] = dict(not_run)
    if recipe.eval.audit_users:
        meta["user_audit"] = {u: audit["users"][u]["fidelity"] for u in audit["ranking"]}
    write_summary(out_dir, summaries, meta)
    if track:
        meta["mlflow_uri"] = log_mlflow(recipe, out_dir, summaries, meta)
    return summaries, meta


def gym_notes(recipe, labels, out_dir: Path) -> dict[str, list[str]]:
    """Each evaluated gym's own lines about the evaluation (`GymSpec.eval_notes`: tau2 says
    whether its numbers compare with tau2's leaderboard, and the checkout it read), by gym name;
    `mua eval` prints them and summary.json keeps them."""
    from mua.gym import get_gym

    notes = {}
    for name in dict.fromkeys(recipe.gym_section(label).name for label in labels):
        make = get_gym(name).eval_notes
        if make is not None:
            notes[name] = list(make(out_dir))
    return notes
