"""One `mua eval` run: resolve the agent, load tasks, evaluate every gym resumably, report.

`run_evaluation(recipe, model=..., gyms=..., out_dir=...)` writes `<out_dir>/results.jsonl`
(one line per trajectory), `summary.json` and `eval_config.json`, logs an MLflow run unless
`track` is False, and returns the per-gym summaries. The output folder must be one mua created
or an empty one (`mua.output_folders.claim_dir`), and no other `mua eval` may be writing it
(`mua.output_folders.FolderLock`). Re-running the same command after an interruption
continues where it stopped (trajectories that were not scored, their user or judge having
failed, are evaluated again), provided the model, tokenizer and tasks have the same content
(`mua.eval.fingerprint`; file digests are cached in `content_hashes.json`); otherwise it is
refused with a hint to use --fresh. The CLI prints the table; nothing here parses arguments.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from mua.config.resolved import RESOLVED_NAME
from mua.eval.report import log_mlflow, write_summary
from mua.eval.store import CONFIG_FILE, ResultStore

HASH_CACHE_FILE = "content_hashes.json"
# files showing that an older mua, before the folder marker existed, wrote an output folder
LEGACY_PROOF = (CONFIG_FILE, RESOLVED_NAME)


def _fingerprint(recipe, model: str, loaded: str, cache) -> dict:
    """Everything that determines results: settings, and the content of the model and tokenizer."""
    from mua.eval.fingerprint import source_fingerprint
    from mua.redact import redact_urls

    r = recipe.rollout
    user = recipe.user.model_dump(mode="json")
    return {
        "model": model,
        "model_content": source_fingerprint(loaded, cache),
        "tokenizer_content": source_fingerprint(recipe.model.tokenizer, cache),
        "agent_endpoint": redact_urls(r.openai.base_url)
        if model.startswith("openai:") or r.engine == "openai"
        else None,
        "n": recipe.eval.n,
        "temperature": recipe.eval.temperature,
        "top_p": r.top_p,
        "top_k": r.top_k,
        "max_new_tokens_per_turn": r.max_new_tokens_per_turn,
        "max_total_tokens": r.max_total_tokens,
        "max_turns": r.max_turns,
        "seed": recipe.data.seed,
        "success_threshold": recipe.eval.success_threshold,
        "user": redact_urls(
            {
                k: v
                for k, v in user.items()
                if k not in ("max_concurrency", "timeout_s", "max_retries", "backoff_s")
            }
        ),
        # per gym, only where set: evaluating another gym in the same folder stays compatible
        "gym_options": {g.name: dict(g.options) for g in recipe.gym_sections() if g.options},
        "reward_weights": {
            g.name: dict(g.reward_weights) for g in recipe.gym_sections() if g.reward_weights
        },
    }


async def _evaluate_all(agent, tasks_by_gym, recipe, store, progress, on_row) -> dict:
    from mua.eval.eval_runner import evaluate
    from mua.gym.mix import gym_run
    from mua.llm.llm_client import user_call_report

    summaries = {}
    try:
        for gym_name, tasks in tasks_by_gym.items():  # keyed by the entry's label
            run = gym_run(recipe, recipe.gym_section(gym_name))
            spec, ctx = run.spec, run.ctx
            result = await evaluate(
                tasks,
                policy=agent.make_policy(spec, ctx),
                gym_spec=spec,
                gym_ctx=ctx,
                tokenizer=agent.tokenizer,
                rollout_cfg=run.rollout_cfg,
                n=recipe.eval.n,
                k_values=recipe.eval.k,
                success_threshold=recipe.eval.success_threshold,
                store=store,
                progress=progress,
                on_row=on_row,
                entry=run.entry,
            )
            # retries, 429s and timeouts of the LLM user (this session's requests)
            summaries[gym_name] = {**result.summary, **user_call_report(ctx.llm)}
    finally:
        if agent.close is not None:
            await agent.close()
            await asyncio.sleep(0)  # let a cancelled engine scheduler finish before the loop closes
    return summaries


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
    from mua.gym.mix import check_gyms, preflight_endpoints
    from mua.output_folders import FolderLock, claim_dir

    check_gyms(recipe, "eval")
    tasks_by_gym = load_eval_tasks(recipe, gyms)
    # a wrong key or model (a user's or a judge's) stops here, before anything is written
    preflight_endpoints(recipe, [recipe.gym_section(label) for label in tasks_by_gym])
    out_dir = claim_dir(out_dir, what="eval output folder", legacy_proof=LEGACY_PROOF)
    # one `mua eval` per folder at a time: two would mix their rows under one summary
    with FolderLock(out_dir, what="eval output folder", verb="mua eval"):
        return _evaluate_into(recipe, model, tasks_by_gym, out_dir, fresh, track, on_row)


def _evaluate_into(recipe, model: str, tasks_by_gym: dict, out_dir: Path, fresh, track, on_row):
    """`run_evaluation`'s work once the folder is claimed and locked."""
    from mua.eval.agents import load_agent, model_source
    from mua.eval.fingerprint import HashCache, task_digest
    from mua.rollout.progress import rollout_progress

    source = model_source(model, recipe)
    cache = HashCache(out_dir / HASH_CACHE_FILE)
    fingerprint = _fingerprint(recipe, model, source[0], cache)
    cache.save()
    digests = {(g, str(t.task_id)): task_digest(t) for g, ts in tasks_by_gym.items() for t in ts}
    store = ResultStore(out_dir, fingerprint, fresh=fresh, task_digests=digests)
    resumed = len(store.rows)
    t0 = time.perf_counter()
    total = sum(len(t) for t in tasks_by_gym.values()) * recipe.eval.n
    try:
        agent = load_agent(model, recipe, source)
        with rollout_progress(total, description="evaluating") as progress:
            summaries = asyncio.run(
                _evaluate_all(agent, tasks_by_gym, recipe, store, progress, on_row)
            )
    finally:
        store.close()
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
    meta["notes"] = gym_notes(recipe, summaries, out_dir)
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
