"""One trajectory's state (`Episode`) and what each part of a turn does to it.

The pieces the runner (`mua.rollout.runner`) calls: `env_call` (a timeout, `UserFailure` or env bug
ends the trajectory with `Stop`; a `MuaError` stops the run), `policy_turn`, `record_step`,
`append_replies`, `cut_turn` (honours `StepResult.cut_at`; `style: raw` messages continue the
model's turn), `score_truncated` (the env's optional `on_truncate`) and `to_trajectory` (with the
drift check). Env text and details go through `mua.text` (no lone surrogates reach the tokenizer).
Not here: the turn loop, parking and concurrency (`mua.rollout.runner`).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

from mua.errors import MuaError
from mua.families.tool_calls import (
    action_as_message,
    cut_by_budget,
    parse_action,
    prompt_opens_reasoning,
)
from mua.gym.api import AgentAction, StepResult, Task, UserFailure
from mua.llm.wait_clock import WaitClock, wait_within
from mua.rollout.trajectory import Trajectory, build_trajectory
from mua.rollout.transcript import (
    TokenRecord,
    TranscriptBuilder,
    check_drift,
    per_turn_samples,
)
from mua.text import clean_messages

log = logging.getLogger("mua.rollout")


class Stop(Exception):
    """Ends one trajectory with a termination reason."""

    def __init__(self, reason: str, detail: str = ""):
        super().__init__(detail)
        self.reason = reason
        self.detail = detail


@dataclass
class Episode:
    """Mutable state of one trajectory, so a timeout can still produce a Trajectory."""

    task: Task
    group_id: str
    sample_index: int
    seed_key: object = None  # `mua.rollout.collect.SeedKey`: what the policy seeds turns by
    builder: TranscriptBuilder | None = None
    messages: list[dict] = field(default_factory=list)
    tools: list[dict] = field(default_factory=list)
    request: dict = field(default_factory=dict)  # `ResetResult.request`: a message agent's extras
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
    version: int = 0  # the policy version its turns are sampled by now (set by `run_one`)


async def env_call(awaitable, timeout_s: float, what: str):
    """Await an env call; map its failures to the trajectory's termination reason."""
    try:
        return await wait_within(awaitable, WaitClock(), timeout_s)
    except asyncio.TimeoutError:
        raise Stop(
            "timeout", f"{what} took longer than {timeout_s:g}s (time waiting on the user excluded)"
        ) from None
    except UserFailure as e:
        raise Stop("user_failure", f"{what}: {e}") from None
    except (asyncio.CancelledError, MuaError):
        # a configuration problem (missing data, bad option, a refused key) stops the run, loudly
        raise
    except Exception as e:  # an env bug ends this trajectory only
        raise Stop("env_error", f"{what} raised {type(e).__name__}: {e}") from None


def env_messages(result, what: str) -> list[dict]:
    """The messages of a ResetResult/StepResult, cleaned; env_error when they are not messages."""
    messages = getattr(result, "messages", None)
    if not isinstance(messages, (list, tuple)) or not all(isinstance(m, dict) for m in messages):
        raise Stop("env_error", f"{what} returned {type(result).__name__} without a message list")
    return clean_messages([dict(m) for m in messages])


def _visible_context(token_ids: list[int], window: int | None) -> list[int]:
    """The ids the policy is shown: the last `window` of them (MuTIS's rolling context), or all."""
    return token_ids[-window:] if window and len(token_ids) > window else token_ids


def _parse_turn(ep: Episode, policy, text: str) -> AgentAction:
    """The sampled turn read with the policy's tool parser, typed by the episode's tools; `auto`
    picks the family of the model's chat template. A prompt that ends in `<think>` (Qwen3.5)
    makes the turn reasoning up to its `</think>`."""
    builder = ep.builder
    template = getattr(builder.renderer.tokenizer, "chat_template", None)
    start = builder.turn_starts[-1]
    tail = builder.renderer.decode(builder.token_ids[max(0, start - 8) : start])
    opened = prompt_opens_reasoning(tail)
    return parse_action(text, policy.tool_parser, ep.tools, template, reasoning_open=opened)


async def policy_turn(
    ep: Episode, policy, turn: int, cfg, stop_ids: list[int]
) -> tuple[AgentAction, bool]:
    """One assistant turn appended to the transcript; returns (action, ended with a stop)."""
    builder = ep.builder
    budget = cfg.max_total_tokens - len(builder.token_ids)
    if policy.kind == "tokens":
        context = _visible_context(builder.token_ids, getattr(cfg, "context_window", None))
        whole = len(context) == len(builder.token_ids)  # routed experts align with the stream
        result = await policy.generate(
            context,
            min(cfg.max_new_tokens_per_turn, budget),
            stop_ids,
            route_key=f"{ep.group_id}/{ep.sample_index}",
            keep_prefix=turn < cfg.max_turns - 1,  # the last allowed turn has no continuation
            seed_key=ep.seed_key,
            turn=turn,
        )
        builder.add_sampled(result.token_ids, result.logprobs, turn, ep.version)
        if whole and result.meta.get("routed_experts") is not None:
            builder.add_routes(result.meta["routed_experts"])
        text = builder.renderer.decode(result.token_ids)
        action = _parse_turn(ep, policy, builder.renderer.strip_stop(text))
        stopped = result.finish_reason == "stop"
        if not stopped:  # cut by the token budget: its last call cannot be known complete
            action = cut_by_budget(action)
        message = action_as_message(action)
    else:
        extra = {"request": ep.request} if ep.request else {}
        message = await policy.act(ep.messages, ep.task, ep.tools, **extra)
        builder.add_assistant_message(message, turn, ep.version)
        action = policy.to_action(message)
        stopped = True
    ep.messages.append(message)
    ep.covered = len(ep.messages)
    ep.ends_with_prompt = False
    ep.last_turn_cut = not stopped
    ep.parse_errors += len(action.parse_errors)
    return action, stopped


def cut_turn(ep: Episode, policy, action: AgentAction, chars: int, stopped: bool) -> bool:
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
        ep.messages[index] = action_as_message(_parse_turn(ep, policy, kept))
        ep.last_turn_cut = True
        return False
    # A message-level policy's turn is re-rendered, shortened, through the template.
    turn = builder.turn_index[start]
    message = {k: v for k, v in ep.messages[index].items() if k != "tool_calls"}
    message["content"] = text[: max(chars, 1)]
    ep.messages[index] = message
    version = builder.record.versions[start]
    builder.truncate(start)
    builder.add_assistant_message(message, turn, version)
    return stopped


async def score_truncated(ep: Episode, env, cfg) -> None:
    """Let an env that scores episodes the runner cut short (tau's upstream rules) do so."""
    hook = getattr(env, "on_truncate", None)
    if hook is None:
        return
    step = await env_call(hook(ep.termination), cfg.call_timeout_s, "env.on_truncate")
    if step is None:
        return
    try:
        reward = float(step.reward)
        components = {str(k): float(v) for k, v in (step.components or {}).items()}
    except (AttributeError, TypeError, ValueError) as e:
        raise Stop("env_error", f"env.on_truncate returned an unreadable result: {e}") from None
    if ep.turn_rewards:
        ep.turn_rewards[-1] += reward
    else:
        ep.turn_rewards.append(reward)
    for name, value in components.items():
        ep.components[name] = ep.components.get(name, 0.0) + value


def record_step(ep: Episode, step: StepResult, parse_errors_seen: int) -> list[dict]:
    """Take in one StepResult and return its (cleaned) messages; a malformed one ends the
    trajectory with env_error."""
    messages = env_messages(step, "env.step")
    try:
        reward = float(step.reward)
        components = {str(k): float(v) for k, v in (step.components or {}).items()}
        errors = {str(k): int(v) for k, v in ((step.info or {}).get("errors") or {}).items()}
    except (AttributeError, TypeError, ValueError) as e:
        raise Stop("env_error", f"env.step returned an unreadable StepResult: {e}") from None
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


def append_replies(ep: Episode, replies: list[dict], stopped: bool, style: str) -> None:
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


def env_side(fn, *args):
    """Apply what an env said to the transcript; an env bug that breaks it (messages no template
    can render, a nonsense cut) ends this trajectory with env_error. A MuaError (a broken chat
    template) stops the run."""
    try:
        return fn(*args)
    except MuaError:
        raise
    except Exception as e:
        raise Stop(
            "env_error", f"env output could not be applied: {type(e).__name__}: {e}"
        ) from None


def _apply_drift_check(ep: Episode, traj: Trajectory, drift_mode: str) -> None:
    b = ep.builder
    if b is None or not b.turn_starts:
        return
    messages = ep.messages[: ep.covered]
    if ep.last_turn_cut and not ep.ends_with_prompt:
        # A turn cut by the budget has no template form; compare everything before it.
        cut = b.turn_starts[-1]
        kept = TokenRecord(token_ids=b.token_ids[:cut], turn_index=b.turn_index[:cut])
        probe = TranscriptBuilder(b.renderer, kept, turn_starts=b.turn_starts[:-1])
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
    if drift_mode == "per_turn":
        traj.per_turn_samples = per_turn_samples(b, messages)
    else:
        traj.metrics["drift_dropped"] = 1.0
    traj.record.loss_mask = [0] * len(traj.record)


def to_trajectory(ep: Episode, drift_mode: str) -> Trajectory:
    b = ep.builder
    metrics = {"drift": 0.0, **{f"tool_errors/{k}": float(n) for k, n in ep.errors.items()}}
    traj = build_trajectory(
        ep.task, ep.group_id, ep.sample_index, b.record if b else TokenRecord(), ep.turn_rewards,
        parse_errors=ep.parse_errors, metrics=metrics, reward_components=dict(ep.components),
        termination=ep.termination, detail=ep.detail, messages=ep.messages, tools=ep.tools,
        num_turns=len(b.turn_starts) if b else 0, prompt_len=b.prompt_len if b else 0,
    )  # fmt: skip
    _apply_drift_check(ep, traj, drift_mode)
    return traj
