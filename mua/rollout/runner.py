"""One conversation, start to finish: `run_one(task, group_id, sample, ...)`.

Each conversation gets a fresh env from `gym_spec.make_env(ctx)` and runs under budgets (tokens
per turn and trajectory, turns, wall time, a timeout per env call; time waiting on LLM endpoints
is left out, `mua.llm.wait_clock`). A failure inside one trajectory ends it with a recorded
`termination`, never the batch; engine errors and any `MuaError` propagate. With a `gate` it parks
before a policy turn (`ParkedConversation`) and `run_one(..., resume=parked)` carries on.
Not here: a turn's effect on the transcript (`mua.rollout.episode`), fanning out (`collect`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import logging
from dataclasses import dataclass

from mua.errors import MuaError
from mua.gym.api import GymContext, GymSpec, Task
from mua.llm.wait_clock import WaitClock, wait_within
from mua.rollout.episode import (
    Episode,
    Stop,
    append_replies,
    cut_turn,
    env_call,
    env_messages,
    env_side,
    policy_turn,
    record_step,
    score_truncated,
    to_trajectory,
)
from mua.rollout.transcript import ChatRenderer, Trajectory, TranscriptBuilder
from mua.text import clean_text, clean_value

log = logging.getLogger("mua.rollout")


class _Parked(Exception):
    """The gate closed: the conversation stops here, to resume later; `pending` is the task of
    the env's answer to its last policy turn when that was still on its way."""

    def __init__(self, pending: asyncio.Future | None = None):
        super().__init__()
        self.pending = pending


@dataclass
class ParkedConversation:
    """A conversation stopped by a closed gate: its state, its open env and, when it parked
    waiting on the env (a simulated user's reply), the task that goes on receiving that reply."""

    episode: Episode
    env: object
    pending: asyncio.Future | None = None


async def _drive(ep: Episode, env, policy, tokenizer, cfg, gate=None) -> None:
    """The turn loop of one trajectory (from `ep.next_turn` when it was parked); sets
    `ep.termination` or raises `Stop`, or `_Parked` when `gate` is closed before a policy turn
    or while the env's answer to a policy turn is on its way."""
    if ep.builder is None:
        reset = await env_call(env.reset(ep.task), cfg.call_timeout_s, "env.reset")
        ep.messages = env_messages(reset, "env.reset")
        ep.tools = clean_value(list(getattr(reset, "tools", None) or []))
        ep.request = dict(getattr(reset, "request", None) or {})
        ep.builder = TranscriptBuilder(ChatRenderer(tokenizer, ep.tools))
        env_side(ep.builder.add_prompt, ep.messages)
        ep.covered = len(ep.messages)
    stop_ids = ep.builder.renderer.stop_token_ids()
    for turn in range(ep.next_turn, cfg.max_turns):
        ep.next_turn = turn
        if len(ep.builder.token_ids) >= cfg.max_total_tokens:
            ep.termination = "length"
            return
        if gate is not None and gate.closed:
            raise _Parked
        action, stopped = await policy_turn(ep, policy, turn, cfg, stop_ids)
        answer = _env_answer(ep, env, policy, action, stopped, turn, cfg)
        ended = await (answer if gate is None else _answer_or_park(answer, gate))
        if ended:
            return
    ep.termination = "max_turns"


async def _env_answer(ep: Episode, env, policy, action, stopped: bool, turn: int, cfg) -> bool:
    """The env's answer to one policy turn, taken into the transcript; True when the episode
    ended there (its `termination` set)."""
    step = await env_call(env.step(action), cfg.call_timeout_s, "env.step")
    if getattr(step, "cut_at", None) is not None:
        stopped = env_side(cut_turn, ep, policy, action, step.cut_at, stopped)
    replies = record_step(ep, step, len(action.parse_errors))
    if step.done:
        ep.termination = "done"
        return True
    if turn == cfg.max_turns - 1:
        ep.termination = "max_turns"
        return True
    if len(ep.builder.token_ids) >= cfg.max_total_tokens:
        ep.termination = "length"
        return True
    env_side(append_replies, ep, replies, stopped, cfg.intervention_style)
    return False


async def _answer_or_park(answer, gate) -> bool:
    """Await the env's answer unless the gate closes first: then the answer goes on arriving in
    the background and the conversation parks with it (`_Parked(pending)`)."""
    task = asyncio.ensure_future(answer)
    if not gate.closed:
        closing = asyncio.ensure_future(gate.wait_closed())
        try:
            await asyncio.wait((task, closing), return_when=asyncio.FIRST_COMPLETED)
        except BaseException:  # cancelled (a time budget, a stopped run): the answer goes too
            task.cancel()
            raise
        finally:
            closing.cancel()
    if task.done():
        return task.result()
    raise _Parked(task)


def attempt_seed(seed: int, attempt: int) -> int:
    """The env context's seed for a conversation's `attempt` (`rollout.retries`): the run's own
    on the first attempt, a value derived from (seed, attempt) on a retry."""
    if attempt == 0:
        return seed
    digest = hashlib.sha256(f"{seed}/retry{attempt}".encode()).digest()
    return int.from_bytes(digest[:4], "little") & (2**31 - 1)


def _make_env(gym_spec: GymSpec, gym_ctx: GymContext, sample_index: int, attempt: int = 0):
    """A fresh env told its trajectory's `sample_index` (and, on a retry, a seed of its own:
    `attempt_seed`); a MuaError (the recipe does not suit the gym) stops the run, since every
    trajectory would hit it, and any other failure ends this trajectory with env_error."""
    if dataclasses.is_dataclass(gym_ctx):
        gym_ctx = dataclasses.replace(
            gym_ctx, sample_index=sample_index, seed=attempt_seed(gym_ctx.seed, attempt)
        )
    try:
        return gym_spec.make_env(gym_ctx)
    except MuaError:
        raise
    except Exception as e:
        raise Stop("env_error", f"make_env raised {type(e).__name__}: {e}") from None


async def run_one(
    task: Task,
    group_id: str,
    sample_index: int,
    *,
    policy,
    gym_spec: GymSpec,
    gym_ctx: GymContext,
    tokenizer,
    rollout_cfg,
    seed_key=None,
    version: int = 0,
    gate=None,
    resume: ParkedConversation | None = None,
) -> Trajectory | ParkedConversation:
    """One trajectory, start to finish, whatever the env does. With a `gate` it may come back
    parked (a `ParkedConversation`); `resume` carries on a parked one (its time budget starts
    again: time parked between steps is not the conversation's). `seed_key` (a
    `mua.rollout.collect.SeedKey`) is what the policy seeds this conversation's turns by; `version`
    (the policy's) is recorded with each token sampled from here on. A parked conversation's
    pending env answer is awaited first, outside that budget: the env call bounds its own time,
    leaving out time spent waiting on LLM endpoints, as every env call does."""
    pending = None
    if resume is not None:
        ep, env, pending = resume.episode, resume.env, resume.pending
    else:
        ep = Episode(task=task, group_id=group_id, sample_index=sample_index, seed_key=seed_key)
        env = None
    ep.version = version
    parked = False
    try:
        if env is None:
            env = _make_env(gym_spec, gym_ctx, sample_index, getattr(seed_key, "attempt", 0))
        ended = False
        if pending is not None:  # the env's answer from before parking (its call has a budget)
            ended = await pending
            pending = None
            ep.next_turn += 1
        if not ended:
            await wait_within(
                _drive(ep, env, policy, tokenizer, rollout_cfg, gate),
                WaitClock(),
                rollout_cfg.trajectory_timeout_s,
            )
        if ep.termination in ("max_turns", "length"):
            await score_truncated(ep, env, rollout_cfg)
    except _Parked as stop:
        parked, pending = True, stop.pending
    except asyncio.TimeoutError:
        ep.termination, ep.detail = (
            "timeout",
            f"trajectory took longer than {rollout_cfg.trajectory_timeout_s:g}s "
            "(time waiting on LLM endpoints excluded)",
        )
    except Stop as stop:
        ep.termination, ep.detail = stop.reason, clean_text(stop.detail)
    finally:
        if env is not None and not parked:
            try:
                await asyncio.wait_for(env.close(), rollout_cfg.call_timeout_s)
            except Exception as e:  # closing is best effort; the trajectory is already recorded
                log.warning("env.close failed for task %s: %s", task.task_id, clean_text(str(e)))
    if parked:
        return ParkedConversation(ep, env, pending)
    if ep.termination in ("timeout", "user_failure", "env_error"):
        log.info("trajectory of task %s ended with %s: %s", task.task_id, ep.termination, ep.detail)
    return to_trajectory(ep, rollout_cfg.drift)


async def discard_parked(parked: ParkedConversation, rollout_cfg) -> None:
    """Close the env of a parked conversation that will not resume (dropped or left over),
    after cancelling the env call it was waiting on."""
    if parked.pending is not None:
        parked.pending.cancel()
        await asyncio.gather(parked.pending, return_exceptions=True)
    try:
        await asyncio.wait_for(parked.env.close(), rollout_cfg.call_timeout_s)
    except Exception as e:  # best effort, as in run_one
        log.warning("env.close failed for a parked conversation: %s", clean_text(str(e)))
