"""The multi-turn rollout runner: many trajectories in flight, each one independent.

`run_rollouts(tasks, n=..., policy=..., ...)` makes n samples per task (one GRPO group per task),
each with a fresh env from `gym_spec.make_env(ctx)` (with `routes`, each task its own gym, user,
limits and n: several gyms' conversations share one runner), at most `rollout.max_concurrency` at once and
no barrier between turns of different trajectories. Budgets: tokens per turn and per trajectory,
turns, wall time per trajectory, and a timeout on every env call; the two time budgets leave out
time spent waiting on LLM endpoints (queued or in a request), which bound their own time per
attempt and retry (`mua.rollout.wait_clock`). Whatever happens inside one trajectory (an env bug,
an env returning nonsense, a user simulator giving up after its retries, a timeout) ends that
trajectory with a recorded `termination` and never the batch. Errors of the policy or engine
themselves do propagate: a broken engine must stop the run, not produce empty trajectories; so
does any `MuaError` from an env: a `UsageError` (missing data, a bad option) or a `RunFailure`
(a user endpoint refusing the key or not knowing the model, HTTP 401/403/404), which would
otherwise end every trajectory the same way. The other trajectories in flight are cancelled then.

Every message an env hands over (reset prompt, user replies, tool outputs) and a trajectory's
detail go through `mua.text`, so unencodable text (lone surrogates) never reaches the tokenizer
or a results file.

Envs may shape the transcript: `StepResult.cut_at` drops what the policy wrote after the env's
reading of a turn, env messages marked `style: raw` continue the model's turn (its stop token
dropped), and an env's optional `on_truncate(reason)` scores an episode the runner cut short.

Partial rollouts (`mua.rollout.carryover`): with a `gate`, a conversation checks it before each
policy turn; once it is closed the conversation parks (`ParkedConversation`: its episode and its
env, not closed) instead of asking the engine for more, and `run_one(..., resume=parked)` carries
on from that turn later, under whatever weights the engine then holds. A conversation whose
env is still answering (a simulated user's reply on its way) when the gate closes parks at once
with that answer's task (`ParkedConversation.pending`), which goes on in the background while
the caller keeps its event loop running; the resumed conversation takes the answer first. A
turn is never split: parking happens before a policy turn or after it, never inside one.

Unreadable model output does not end a trajectory (there is no `parse_failure` reason): it comes
back as an observation and is counted, and the turn budget bounds how long that can go on.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

from mua.errors import MuaError
from mua.gym.api import AgentAction, GymContext, GymSpec, StepResult, Task, UserFailure
from mua.rollout.toolcalls import action_as_message, parse_action
from mua.rollout.transcript import (
    ChatRenderer,
    Trajectory,
    TranscriptBuilder,
    check_drift,
    per_turn_samples,
)
from mua.rollout.wait_clock import WaitClock, wait_within
from mua.text import clean_messages, clean_text, clean_value

log = logging.getLogger("mua.rollout")


class _Stop(Exception):
    """Ends one trajectory with a termination reason."""

    def __init__(self, reason: str, detail: str = ""):
        super().__init__(detail)
        self.reason = reason
        self.detail = detail


@dataclass
class _Episode:
    """Mutable state of one trajectory, so a timeout can still produce a Trajectory."""

    task: Task
    group_id: str
    sample_index: int
    builder: TranscriptBuilder | None = None
    messages: list[dict] = field(default_factory=list)
    tools: list[dict] = field(default_factory=list)
    turn_rewards: list[float] = field(default_factory=list)
    components: dict[str, float] = field(default_factory=dict)
    errors: dict[str, int] = field(default_factory=dict)
    parse_errors: int = 0
    termination: str = "max_turns"
    detail: str = ""
    covered: int = 0  # messages the token stream covers
    ends_with_prompt: bool = True
    last_turn_cut: bool = False  # the stream ends inside an assistant turn (no stop token)
    next_turn: int = 0  # the assistant turn the loop is at (a parked conversation resumes there)


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

    episode: _Episode
    env: object
    pending: asyncio.Future | None = None


async def _env_call(awaitable, timeout_s: float, what: str):
    """Await an env call; map its failures to the trajectory's termination reason."""
    try:
        return await wait_within(awaitable, WaitClock(), timeout_s)
    except asyncio.TimeoutError:
        raise _Stop(
            "timeout", f"{what} took longer than {timeout_s:g}s (time waiting on the user excluded)"
        ) from None
    except UserFailure as e:
        raise _Stop("user_failure", f"{what}: {e}") from None
    except (asyncio.CancelledError, MuaError):
        # a configuration problem (missing data, bad option, a refused key) stops the run, loudly
        raise
    except Exception as e:  # an env bug ends this trajectory only
        raise _Stop("env_error", f"{what} raised {type(e).__name__}: {e}") from None


def _env_messages(result, what: str) -> list[dict]:
    """The messages of a ResetResult/StepResult, cleaned; env_error when they are not messages."""
    messages = getattr(result, "messages", None)
    if not isinstance(messages, (list, tuple)) or not all(isinstance(m, dict) for m in messages):
        raise _Stop("env_error", f"{what} returned {type(result).__name__} without a message list")
    return clean_messages([dict(m) for m in messages])


def _strip_stop_text(text: str, stop_text: str) -> str:
    return text[: -len(stop_text)] if stop_text and text.endswith(stop_text) else text


async def _policy_turn(
    ep: _Episode, policy, turn: int, cfg, stop_ids: list[int]
) -> tuple[AgentAction, bool]:
    """One assistant turn appended to the transcript; returns (action, ended with a stop)."""
    builder = ep.builder
    budget = cfg.max_total_tokens - len(builder.token_ids)
    if policy.kind == "tokens":
        result = await policy.generate(
            builder.token_ids,
            min(cfg.max_new_tokens_per_turn, budget),
            stop_ids,
            route_key=f"{ep.group_id}/{ep.sample_index}",
            keep_prefix=turn < cfg.max_turns - 1,  # the last allowed turn has no continuation
        )
        builder.add_sampled(result.token_ids, result.logprobs, turn)
        text = builder.renderer.decode(result.token_ids)
        action = parse_action(
            _strip_stop_text(text, builder.renderer.stop_text), policy.tool_parser
        )
        message = action_as_message(action)
        stopped = result.finish_reason == "stop"
    else:
        message = await policy.act(ep.messages, ep.task, ep.tools)
        builder.add_assistant_message(message, turn)
        action = policy.to_action(message)
        stopped = True
    ep.messages.append(message)
    ep.covered = len(ep.messages)
    ep.ends_with_prompt = False
    ep.last_turn_cut = not stopped
    ep.parse_errors += len(action.parse_errors)
    return action, stopped


def _cut_turn(ep: _Episode, policy, action: AgentAction, chars: int, stopped: bool) -> bool:
    """Drop what the policy wrote after the first `chars` characters of its turn (`raw` text).

    The kept tokens are the shortest prefix of the sampled ones that decodes to at least those
    characters (a token can straddle the cut); the turn then ends without its stop token.
    Returns whether the turn still ends with a stop (False once sampled tokens were cut).
    """
    text = action.raw or action.text
    if chars >= len(text):
        return stopped
    builder, index = ep.builder, ep.covered - 1
    start = builder.turn_starts[-1]
    if policy.kind == "tokens":
        ids = builder.token_ids[start:]
        decode = builder.renderer.decode
        lo, hi = 1, len(ids)
        while lo < hi:  # shortest prefix whose text reaches the cut
            mid = (lo + hi) // 2
            if len(decode(ids[:mid])) >= chars:
                hi = mid
            else:
                lo = mid + 1
        builder.truncate(start + lo)
        kept = decode(ids[:lo])
        ep.messages[index] = action_as_message(parse_action(kept, policy.tool_parser))
        ep.last_turn_cut = True
        return False
    # A message-level policy's turn is re-rendered, shortened, through the template.
    turn = builder.turn_index[start]
    message = {k: v for k, v in ep.messages[index].items() if k != "tool_calls"}
    message["content"] = text[: max(chars, 1)]
    ep.messages[index] = message
    builder.truncate(start)
    builder.add_assistant_message(message, turn)
    return stopped


async def _score_truncated(ep: _Episode, env, cfg) -> None:
    """Let an env that scores episodes the runner cut short (tau's upstream rules) do so."""
    hook = getattr(env, "on_truncate", None)
    if hook is None:
        return
    step = await _env_call(hook(ep.termination), cfg.call_timeout_s, "env.on_truncate")
    if step is None:
        return
    try:
        reward = float(step.reward)
        components = {str(k): float(v) for k, v in (step.components or {}).items()}
    except (AttributeError, TypeError, ValueError) as e:
        raise _Stop("env_error", f"env.on_truncate returned an unreadable result: {e}") from None
    if ep.turn_rewards:
        ep.turn_rewards[-1] += reward
    else:
        ep.turn_rewards.append(reward)
    for name, value in components.items():
        ep.components[name] = ep.components.get(name, 0.0) + value


def _record_step(ep: _Episode, step: StepResult, parse_errors_seen: int) -> list[dict]:
    """Take in one StepResult and return its (cleaned) messages; a malformed one ends the
    trajectory with env_error."""
    messages = _env_messages(step, "env.step")
    try:
        reward = float(step.reward)
        components = {str(k): float(v) for k, v in (step.components or {}).items()}
        errors = {str(k): int(v) for k, v in ((step.info or {}).get("errors") or {}).items()}
    except (AttributeError, TypeError, ValueError) as e:
        raise _Stop("env_error", f"env.step returned an unreadable StepResult: {e}") from None
    ep.turn_rewards.append(reward)
    for name, value in components.items():
        ep.components[name] = ep.components.get(name, 0.0) + value
    for kind, count in errors.items():
        ep.errors[kind] = ep.errors.get(kind, 0) + count
    # An env that reports the parse errors it was handed must not double the runner's count;
    # one that parses text itself may report more.
    ep.parse_errors += max(0, errors.get("parse_error", 0) - parse_errors_seen)
    ep.messages.extend(messages)
    return messages


def _append_replies(ep: _Episode, replies: list[dict], stopped: bool, style: str) -> None:
    builder = ep.builder
    raw = style == "raw" or all(m.get("style") == "raw" for m in replies)
    if raw and replies and all(m.get("role") == "env" for m in replies):
        if stopped and builder.ended_with_stop():
            # Raw text continues the model's own turn: its stop token goes, as if never sampled.
            builder.truncate(len(builder.token_ids) - 1)
        for i, msg in enumerate(replies):
            ep.messages[len(ep.messages) - len(replies) + i]["style"] = "raw"
            builder.add_raw(msg.get("content") or "")
        ep.covered = len(ep.messages)
        return
    if not stopped:
        builder.close_truncated_turn()
    builder.add_followup(replies)
    ep.covered = len(ep.messages)
    ep.ends_with_prompt = True
    ep.last_turn_cut = False


async def _drive(ep: _Episode, env, policy, tokenizer, cfg, gate=None, pending=None) -> None:
    """The turn loop of one trajectory (from `ep.next_turn` when it was parked); sets
    `ep.termination` or raises `_Stop`, or `_Parked` when `gate` is closed before a policy turn
    or while the env's answer to a policy turn is on its way. `pending` is that answer's task,
    from when the conversation parked: it is awaited first."""
    if ep.builder is None:
        reset = await _env_call(env.reset(ep.task), cfg.call_timeout_s, "env.reset")
        ep.messages = _env_messages(reset, "env.reset")
        ep.tools = clean_value(list(getattr(reset, "tools", None) or []))
        ep.builder = TranscriptBuilder(ChatRenderer(tokenizer, ep.tools))
        _env_side(ep.builder.add_prompt, ep.messages)
        ep.covered = len(ep.messages)
    stop_ids = ep.builder.renderer.stop_token_ids()
    first = ep.next_turn
    if pending is not None:  # the answer to turn `ep.next_turn`, received while parked
        if await pending:
            return
        first += 1
    for turn in range(first, cfg.max_turns):
        ep.next_turn = turn
        if len(ep.builder.token_ids) >= cfg.max_total_tokens:
            ep.termination = "length"
            return
        if gate is not None and gate.closed:
            raise _Parked
        action, stopped = await _policy_turn(ep, policy, turn, cfg, stop_ids)
        answer = _env_answer(ep, env, policy, action, stopped, turn, cfg)
        if gate is None:
            ended = await answer
        else:
            gate.turn_sampled(ep.group_id, ep.sample_index)
            ended = await _answer_or_park(answer, gate)
        if ended:
            return
    ep.termination = "max_turns"


async def _env_answer(ep: _Episode, env, policy, action, stopped: bool, turn: int, cfg) -> bool:
    """The env's answer to one policy turn, taken into the transcript; True when the episode
    ended there (its `termination` set)."""
    step = await _env_call(env.step(action), cfg.call_timeout_s, "env.step")
    if getattr(step, "cut_at", None) is not None:
        stopped = _env_side(_cut_turn, ep, policy, action, step.cut_at, stopped)
    replies = _record_step(ep, step, len(action.parse_errors))
    if step.done:
        ep.termination = "done"
        return True
    if turn == cfg.max_turns - 1:
        ep.termination = "max_turns"
        return True
    if len(ep.builder.token_ids) >= cfg.max_total_tokens:
        ep.termination = "length"
        return True
    _env_side(_append_replies, ep, replies, stopped, cfg.intervention_style)
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


def _env_side(fn, *args):
    """Apply what an env said to the transcript; an env bug that breaks it (messages no template
    can render, a nonsense cut) ends this trajectory with env_error. A MuaError (a broken chat
    template) stops the run."""
    try:
        return fn(*args)
    except MuaError:
        raise
    except Exception as e:
        raise _Stop(
            "env_error", f"env output could not be applied: {type(e).__name__}: {e}"
        ) from None


def _metrics(ep: _Episode) -> dict[str, float]:
    b = ep.builder
    out = {
        "tokens": float(len(b.token_ids)) if b else 0.0,
        "assistant_tokens": float(sum(b.loss_mask)) if b else 0.0,
        "parse_errors": float(ep.parse_errors),
        "drift": 0.0,
    }
    for kind, count in ep.errors.items():
        out[f"tool_errors/{kind}"] = float(count)
    return out


def _apply_drift_check(ep: _Episode, traj: Trajectory, drift_mode: str) -> None:
    b = ep.builder
    if b is None or not b.turn_starts:
        return
    messages = ep.messages[: ep.covered]
    if ep.last_turn_cut and not ep.ends_with_prompt:
        # A turn cut by the budget has no template form; compare everything before it.
        cut = b.turn_starts[-1]
        probe = TranscriptBuilder(
            b.renderer,
            token_ids=b.token_ids[:cut],
            turn_index=b.turn_index[:cut],
            turn_starts=b.turn_starts[:-1],
        )
        diff = check_drift(probe, messages[:-1], ends_with_prompt=True)
        b.retokenized_turns = probe.retokenized_turns
    else:
        diff = check_drift(b, messages, ends_with_prompt=ep.ends_with_prompt)
    traj.metrics["retokenized_turns"] = float(b.retokenized_turns)
    if diff is None:
        return
    traj.metrics["drift"] = 1.0
    log.warning(
        "re-rendered conversation differs from the sampled tokens (task %s): %s",
        ep.task.task_id,
        diff,
    )
    traj.loss_mask = [0] * len(traj.loss_mask)
    if drift_mode == "per_turn":
        traj.per_turn_samples = per_turn_samples(b, messages)
    else:
        traj.metrics["drift_dropped"] = 1.0


def _to_trajectory(ep: _Episode, drift_mode: str) -> Trajectory:
    b = ep.builder
    traj = Trajectory(
        task_id=ep.task.task_id,
        group_id=ep.group_id,
        sample_index=ep.sample_index,
        token_ids=list(b.token_ids) if b else [],
        sources=list(b.sources) if b else [],
        loss_mask=list(b.loss_mask) if b else [],
        logprobs=list(b.logprobs) if b else [],
        turn_index=list(b.turn_index) if b else [],
        turn_rewards=list(ep.turn_rewards),
        reward=float(sum(ep.turn_rewards)),
        reward_components=dict(ep.components),
        termination=ep.termination,
        detail=ep.detail,
        messages=ep.messages,
        tools=ep.tools,
        num_turns=len(b.turn_starts) if b else 0,
        prompt_len=b.prompt_len if b else 0,
        metrics=_metrics(ep),
    )
    _apply_drift_check(ep, traj, drift_mode)
    return traj


def _make_env(gym_spec: GymSpec, gym_ctx: GymContext):
    """A fresh env; a MuaError (the recipe does not suit the gym) stops the run, since every
    trajectory would hit it, and any other failure ends this trajectory with env_error."""
    try:
        return gym_spec.make_env(gym_ctx)
    except MuaError:
        raise
    except Exception as e:
        raise _Stop("env_error", f"make_env raised {type(e).__name__}: {e}") from None


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
    gate=None,
    resume: ParkedConversation | None = None,
) -> Trajectory | ParkedConversation:
    """One trajectory, start to finish, whatever the env does. With a `gate` it may come back
    parked (a `ParkedConversation`); `resume` carries on a parked one (its time budget starts
    again: time parked between steps is not the conversation's)."""
    pending = None
    if resume is not None:
        ep, env, pending = resume.episode, resume.env, resume.pending
    else:
        ep, env = _Episode(task=task, group_id=group_id, sample_index=sample_index), None
    parked = False
    try:
        if env is None:
            env = _make_env(gym_spec, gym_ctx)
        await wait_within(
            _drive(ep, env, policy, tokenizer, rollout_cfg, gate, pending),
            WaitClock(),
            rollout_cfg.trajectory_timeout_s,
        )
        if ep.termination in ("max_turns", "length"):
            await _score_truncated(ep, env, rollout_cfg)
    except _Parked as stop:
        parked, pending = True, stop.pending
    except asyncio.TimeoutError:
        ep.termination, ep.detail = (
            "timeout",
            f"trajectory took longer than {rollout_cfg.trajectory_timeout_s:g}s "
            "(time waiting on LLM endpoints excluded)",
        )
    except _Stop as stop:
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
    return _to_trajectory(ep, rollout_cfg.drift)


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


@dataclass(frozen=True)
class Route:
    """Where one task's conversations run: its gym, env context (user), limits and group size.

    `label` names the `gyms:` entry (it becomes each trajectory's `gym`); `policy`, when set,
    replaces the run's policy for these conversations (e.g. another sampling temperature)."""

    gym_spec: GymSpec
    gym_ctx: GymContext
    rollout_cfg: object
    n: int
    label: str = ""
    policy: object = None


async def run_rollouts(
    tasks: list[Task],
    *,
    n: int | None = None,
    policy,
    gym_spec: GymSpec | None = None,
    gym_ctx: GymContext | None = None,
    tokenizer,
    rollout_cfg,
    progress=None,
    routes: list[Route] | None = None,
) -> list[Trajectory]:
    """n trajectories per task, grouped by task (`group_id`), in task order then sample order.

    One gym: `gym_spec`, `gym_ctx` and `n` serve every task. Several: `routes[i]` says where
    task i runs (its gym, user, limits and n); conversations of all gyms are in flight together,
    at most `rollout_cfg.max_concurrency` at once. `progress`, when given, gets
    `advance(trajectory)` as each trajectory finishes.
    """
    if routes is None:
        route = Route(gym_spec, gym_ctx, rollout_cfg, n or 1)
        routes = [route] * len(tasks)
    if len(routes) != len(tasks):
        raise ValueError(f"{len(routes)} routes for {len(tasks)} tasks")
    limit = asyncio.Semaphore(rollout_cfg.max_concurrency)

    async def one(task_pos: int, task: Task, k: int, route: Route) -> Trajectory:
        async with limit:
            traj = await run_one(
                task,
                f"{task_pos}:{task.task_id}",
                k,
                policy=route.policy or policy,
                gym_spec=route.gym_spec,
                gym_ctx=route.gym_ctx,
                tokenizer=tokenizer,
                rollout_cfg=route.rollout_cfg,
            )
        traj.gym = route.label
        if progress is not None:
            progress.advance(traj)
        return traj

    jobs = [
        asyncio.ensure_future(one(pos, task, k, route))
        for pos, (task, route) in enumerate(zip(tasks, routes, strict=True))
        for k in range(route.n)
    ]
    try:
        return list(await asyncio.gather(*jobs))
    except BaseException:
        # One failure that stops the run (RunFailure, a broken engine, an interrupt): the other
        # trajectories would only keep the endpoints busy.
        for job in jobs:
            job.cancel()
        await asyncio.gather(*jobs, return_exceptions=True)
        raise


def run_rollouts_sync(tasks: list[Task], **kwargs) -> list[Trajectory]:
    """`run_rollouts` from synchronous code (starts and closes its own event loop)."""
    return asyncio.run(run_rollouts(tasks, **kwargs))
