"""Program gyms: one run of an agent program per task sample, through the gateway, as a `Trajectory`.

`run_program` is what `mua.rollout.collect` runs for a `gyms:` entry with a `program:` section
(`mua.config.gyms.ProgramConfig`): it opens a session on the event loop's gateway, starts the
program (a command in its own process group, or an in-process entry point: `mua.plugin_targets`)
with the gateway's URLs, the session key and `MUA_TASK`, waits within `program.timeout_s`, and
reads the reward (`stdout`, `gym` or `env`). A crash, overrun or missing reward ends the trajectory
as `env_error` or `timeout` (masked), never a silent 0. Variables and rules: docs/gateway.md.
Not here: the HTTP side (`mua.gateway.server`), the prefix rule (`mua.gateway.session`).
"""

from __future__ import annotations

import asyncio
import inspect
import json
import math
import os
import signal
import weakref
from dataclasses import dataclass

from mua.errors import MuaError, UsageError
from mua.gateway.env_routes import EnvState
from mua.gateway.server import Gateway
from mua.gateway.session import Session, SessionLimits
from mua.gym.program_io import command_line, reward_from_stdout, task_json
from mua.plugin_targets import load_entry_point
from mua.rollout.trajectory import Trajectory, build_trajectory
from mua.text import clean_text

TAIL_CHARS = 2000
_GATEWAYS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # loop -> [gateway, users]


@dataclass
class Outcome:
    """How a program run ended: its reward (None: none given) or why it failed."""

    reward: float | None = None
    termination: str = "done"
    detail: str = ""
    stderr_tail: str = ""
    crashed: bool = False  # a non-zero exit, or an entry point that raised
    label: str = ""  # the gyms entry whose program it was


def _tail(text: str) -> str:
    return clean_text(text[-TAIL_CHARS:]).strip()


async def _gateway(tokenizer, tool_parser: str) -> Gateway:
    loop = asyncio.get_running_loop()
    held = _GATEWAYS.get(loop)
    if held is None or held[0].tokenizer is not tokenizer or held[0].tool_parser != tool_parser:
        held = _GATEWAYS[loop] = [Gateway(tokenizer, tool_parser=tool_parser), 0, None]
        held[2] = asyncio.ensure_future(held[0].start())
    held[1] += 1
    await asyncio.shield(held[2])
    return held[0]


async def _release(gateway: Gateway) -> None:
    held = _GATEWAYS.get(asyncio.get_running_loop())
    if held is None or held[0] is not gateway:
        await gateway.close()
        return
    held[1] -= 1
    if held[1] == 0:
        del _GATEWAYS[asyncio.get_running_loop()]
        await gateway.close()


async def _drain(stream, buf: bytearray, keep: int = 1 << 20) -> None:
    """Read a pipe to its end, keeping its last `keep` bytes."""
    while chunk := await stream.read(1 << 16):
        buf.extend(chunk)
        del buf[:-keep]


def _kill_group(proc) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


async def _run_command(program, env: dict[str, str], defaults: dict | None = None) -> Outcome:
    proc = await asyncio.create_subprocess_exec(
        *command_line(program.command),
        env={**os.environ, **(defaults or {}), **program.env, **env},
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,  # its own process group: a deadline kills its children too
    )
    out, err = bytearray(), bytearray()
    readers = [
        asyncio.ensure_future(_drain(proc.stdout, out)),
        asyncio.ensure_future(_drain(proc.stderr, err)),
    ]
    timed_out = False
    try:
        await asyncio.wait_for(proc.wait(), program.timeout_s)
    except asyncio.TimeoutError:
        timed_out = True
    finally:  # the deadline, a cancelled run, or children left holding the pipes
        _kill_group(proc)
        await proc.wait()
        await asyncio.wait(readers, timeout=5)
        for reader in readers:
            reader.cancel()
    stdout, stderr = out.decode(errors="replace"), err.decode(errors="replace")
    if timed_out:
        return Outcome(
            None,
            "timeout",
            f"program ran past its {program.timeout_s:g}s deadline (program.timeout_s) and was killed",
            _tail(stderr),
        )
    if proc.returncode != 0:
        return Outcome(
            None,
            "env_error",
            f"program exited with status {proc.returncode}",
            _tail(stderr),
            crashed=True,
        )
    return Outcome(reward_from_stdout(stdout), stderr_tail=_tail(stderr))


async def _run_entry_point(program, base_url: str, api_key: str, task) -> Outcome:
    fn = load_entry_point(program.entry_point)
    if inspect.iscoroutinefunction(fn):
        call = fn(base_url, api_key, json.loads(task_json(task)))
    else:  # a thread cannot be killed: past the deadline it is left to finish on its own
        call = asyncio.to_thread(fn, base_url, api_key, json.loads(task_json(task)))
    try:
        value = await asyncio.wait_for(call, program.timeout_s)
    except asyncio.TimeoutError:
        return Outcome(None, "timeout", f"entry point ran past its {program.timeout_s:g}s deadline")
    except Exception as e:
        why = f"entry point raised {type(e).__name__}"
        return Outcome(None, "env_error", why, _tail(str(e)), crashed=True)
    if isinstance(value, dict):
        value = value.get("reward")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return Outcome(float(value))
    return Outcome(None)


async def run_program(
    task, group_id: str, sample_index: int, *, policy, run, tokenizer, seed_key=None, version=0
) -> Trajectory:
    """One program run on `task` as a Trajectory (see the module docstring); `run` is the
    entry's `mua.gym.mix.GymRun`, `version` the policy's (recorded with each sampled token)."""
    if not hasattr(policy, "generate"):
        raise UsageError(
            f"gyms ({run.label}): a program gym needs a model policy to sample from; "
            "message-level policies (a scripted expert) cannot serve it"
        )
    program, cfg = run.entry.program, run.rollout_cfg
    gateway = await _gateway(tokenizer, policy.tool_parser)
    limits = SessionLimits(cfg.max_turns, cfg.max_new_tokens_per_turn, cfg.max_total_tokens)
    env = EnvState(lambda: run.spec.make_env(run.ctx), task, policy.tool_parser)
    session = gateway.open_session(
        limits=limits, policy=policy, seed_key=seed_key, env=env, version=version
    )
    variables = {
        "OPENAI_BASE_URL": gateway.base_url(),
        "OPENAI_API_KEY": session.key,
        "ANTHROPIC_BASE_URL": gateway.base_url().removesuffix("/v1"),
        "ANTHROPIC_API_KEY": session.key,
        "MUA_TASK": task_json(task),
        "MUA_MODEL": gateway.model_name,
    }
    try:
        if program.command is not None:
            defaults = {
                "OPENAI_AGENTS_DISABLE_TRACING": "1",
                "OPENAI_DEFAULT_MODEL": gateway.model_name,
            }
            outcome = await _run_command(program, variables, defaults)
        else:
            outcome = await _run_entry_point(
                program, variables["OPENAI_BASE_URL"], session.key, task
            )
    finally:
        gateway.close_session(session.key)
        await _release(gateway)
        await _close_env(env)
    if session.failure is not None:  # a broken engine stops the run
        raise session.failure
    outcome = _scored(outcome, session, program, run, task)
    outcome.label = run.label
    return to_trajectory(task, group_id, sample_index, session, outcome)


async def _close_env(env: EnvState) -> None:
    try:
        await env.close()
    except Exception as e:  # best effort, as the built-in loop's close
        env.failure = env.failure or f"env.close raised {type(e).__name__}: {e}"


def _scored(outcome: Outcome, session: Session, program, run, task) -> Outcome:
    """The outcome with its reward: the gym's score when asked for, a truncation when a budget
    refused a request, a failure when nothing gave a reward."""
    if session.budget_hit and outcome.termination != "timeout":
        # the program ended (or failed) after the gateway refused it a turn: a truncation
        outcome.reward = outcome.reward if outcome.termination == "done" else None
        outcome.termination = session.budget_hit
        outcome.reward = outcome.reward or 0.0
        outcome.detail = f"a request was refused: the session's {session.budget_hit} budget"
        return outcome
    env = session.context["env"]
    if env.failure and not env.failure.startswith("env.close"):
        return Outcome(None, "env_error", env.failure, outcome.stderr_tail)
    if outcome.termination != "done":
        return outcome
    if program.reward == "env":
        if not env.rewards:
            return Outcome(
                None,
                "env_error",
                "reward: env, but the program never stepped the env (POST /v1/env/step)",
                outcome.stderr_tail,
            )
        outcome.reward = sum(env.rewards)
    if program.reward == "gym":
        outcome.reward, failure = _gym_score(session, run, task)
        if failure:
            return Outcome(None, "env_error", failure, outcome.stderr_tail)
    if outcome.reward is None:
        outcome.termination = "env_error"
        outcome.detail = 'program printed no reward line (`{"reward": x}` as its last JSON line)'
    return outcome


def _gym_score(session: Session, run, task) -> tuple[float | None, str]:
    """(reward, "") from the gym's `score_conversation`, or (None, why) when it raised or gave
    no finite number: a gym's bug ends this trajectory (env_error), as in the built-in loop."""
    try:
        value = run.spec.score_conversation(all_messages(session), task, run.ctx)
    except MuaError:  # a configuration problem stops the run, loudly
        raise
    except Exception as e:
        return None, f"score_conversation raised {type(e).__name__}: {e}"
    try:
        reward = float(value)
    except (TypeError, ValueError):
        reward = math.nan
    if not math.isfinite(reward):
        return None, f"score_conversation returned {value!r}, not a finite number"
    return reward, ""


def all_messages(session: Session, split_note: bool = False) -> list[dict]:
    """Every sample's messages in order (with a note where the session split, when asked)."""
    out: list[dict] = []
    for i, seg in enumerate(session.segments):
        if i and split_note:
            out.append(
                {
                    "role": "env",
                    "content": "[gateway] the program's next request did not continue this "
                    "conversation: a new sample starts here (split)",
                }
            )
        out.extend(dict(m) for m in seg.messages)
    return out


def to_trajectory(task, group_id: str, sample_index: int, session: Session, outcome: Outcome):
    failed = outcome.termination in ("env_error", "timeout")
    reward = 0.0 if failed or outcome.reward is None else outcome.reward
    turn_rewards = [0.0] * session.turns
    if turn_rewards:
        turn_rewards[-1] = reward
    messages = all_messages(session, split_note=True)
    if failed:
        note = outcome.detail + (
            f"\nstderr (last lines):\n{outcome.stderr_tail}" if outcome.stderr_tail else ""
        )
        messages.append({"role": "env", "content": f"[program] {note}"})
    lengths = session.segment_lengths()
    crashed = outcome.crashed and outcome.termination == "env_error"
    stderr = f"; stderr: {outcome.stderr_tail[-400:]}" if failed and outcome.stderr_tail else ""
    return build_trajectory(
        task, group_id, sample_index, session.record(), turn_rewards, reward=reward,
        parse_errors=session.malformed,
        metrics={
            **session.metrics(),
            **({f"gateway/program_crashed/{outcome.label}": 1.0} if crashed else {}),
        },
        reward_components={"program": reward}, termination=outcome.termination,
        detail=clean_text(outcome.detail + stderr), messages=messages,
        tools=list(session.segments[-1].tools) if session.segments else [],
        num_turns=session.turns,
        prompt_len=session.segments[0].builder.prompt_len if session.segments else 0,
        segments=lengths if len(lengths) > 1 else [],
    )  # fmt: skip
