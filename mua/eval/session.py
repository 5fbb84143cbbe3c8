"""One `mua eval` run: resolve the agent, load tasks, evaluate every gym resumably, report.

`run_evaluation(recipe, model=..., gyms=..., out_dir=...)` writes `<out_dir>/results.jsonl`
(one line per trajectory), `summary.json` and `eval_config.json`, logs an MLflow run unless
`track` is False, and returns the per-gym summaries. Re-running the same command after an
interruption continues where it stopped. The CLI prints the table; nothing here parses arguments.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from mua.eval.report import log_mlflow, write_summary
from mua.eval.store import ResultStore


def _fingerprint(recipe, model: str) -> dict:
    r = recipe.rollout
    user = recipe.user.model_dump(mode="json")
    return {
        "model": model,
        "n": recipe.eval.n,
        "temperature": recipe.eval.temperature,
        "top_p": r.top_p,
        "top_k": r.top_k,
        "max_new_tokens_per_turn": r.max_new_tokens_per_turn,
        "max_total_tokens": r.max_total_tokens,
        "max_turns": r.max_turns,
        "seed": recipe.data.seed,
        "success_threshold": recipe.eval.success_threshold,
        "user": {
            k: v
            for k, v in user.items()
            if k not in ("max_concurrency", "timeout_s", "max_retries", "backoff_s")
        },
        "gym_options": dict(recipe.gym.options),
        "reward_weights": dict(recipe.gym.reward_weights),
    }


async def _evaluate_all(agent, tasks_by_gym, recipe, store, progress, on_row) -> dict:
    from mua.eval.runner import evaluate
    from mua.gym import GymContext, get_gym
    from mua.gym.budgets import with_gym_budgets
    from mua.rollout.llm_client import make_llm_client, user_call_report

    user = recipe.user
    summaries = {}
    try:
        for gym_name, tasks in tasks_by_gym.items():
            spec = get_gym(gym_name)
            ctx = GymContext(
                options=dict(recipe.gym.options) if recipe.gym.name == gym_name else {},
                reward_weights=dict(recipe.gym.reward_weights)
                if recipe.gym.name == gym_name
                else {},
                user_kind=user.kind,
                llm=make_llm_client(user),
                seed=recipe.data.seed,
            )
            result = await evaluate(
                tasks,
                policy=agent.make_policy(spec, ctx),
                gym_spec=spec,
                gym_ctx=ctx,
                tokenizer=agent.tokenizer,
                rollout_cfg=with_gym_budgets(recipe.rollout, spec),
                n=recipe.eval.n,
                k_values=recipe.eval.k,
                success_threshold=recipe.eval.success_threshold,
                store=store,
                progress=progress,
                on_row=on_row,
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
    from mua.eval.agents import load_agent
    from mua.eval.tasks import load_eval_tasks
    from mua.rollout.llm_client import preflight_user
    from mua.rollout.progress import rollout_progress

    out_dir = Path(out_dir)
    tasks_by_gym = load_eval_tasks(recipe, gyms)
    preflight_user(recipe.user)  # a wrong key or model stops here, before anything is written
    store = ResultStore(out_dir, _fingerprint(recipe, model), fresh=fresh)
    resumed = len(store.rows)
    agent = load_agent(model, recipe)
    t0 = time.perf_counter()
    total = sum(len(t) for t in tasks_by_gym.values()) * recipe.eval.n
    try:
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
        "seconds": round(time.perf_counter() - t0, 2),
    }
    write_summary(out_dir, summaries, meta)
    if track:
        meta["mlflow_uri"] = log_mlflow(recipe, out_dir, summaries, meta)
    return summaries, meta
