"""How an mcp-gym episode is scored when it ends: a judge tool, a gym's scorer, or a program.

`episode_reward` returns a finite number or raises `McpFault` (the trajectory's env_error, masked;
never a silent 0): a judge tool that errs or answers no number, a gym scorer that raises, a scoring
program that fails, overruns its deadline or prints no `{"reward": x}`.
"""

from __future__ import annotations

import asyncio
import json
import math
import os

from gyms.mcp.hub import McpFault
from mua.gym.program_io import command_line, reward_from_stdout, task_json
from mua.text import clean_text


def reward_from_text(text: str) -> float | None:
    """A judge's answer as a number: the text itself, or a JSON object's `reward`."""
    try:
        value = json.loads(text)
    except ValueError:
        return None
    if isinstance(value, dict):
        value = value.get("reward")
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


async def _program_reward(cfg, task, messages: list[dict]) -> float:
    payload = json.dumps({"task": json.loads(task_json(task)), "messages": messages})
    proc = await asyncio.create_subprocess_exec(
        *command_line(cfg.command),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=dict(os.environ),
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(payload.encode()), cfg.timeout_s)
    except asyncio.TimeoutError:
        proc.kill()
        await proc.wait()
        raise McpFault(f"reward program took longer than {cfg.timeout_s:g}s") from None
    tail = clean_text(err.decode("utf-8", "replace")[-2000:]).strip()
    if proc.returncode != 0:
        raise McpFault(f"reward program exited with status {proc.returncode}; stderr: {tail}")
    reward = reward_from_stdout(out.decode("utf-8", "replace"))
    if reward is None or not math.isfinite(reward):
        raise McpFault(f'reward program printed no {{"reward": x}} line; stderr: {tail}')
    return reward


async def episode_reward(env) -> float:
    """The reward of `env`'s finished episode (an `McpEnv`), by its options' `reward.kind`."""
    cfg = env.opts.reward
    if cfg.kind == "none":
        return 0.0
    if cfg.kind == "program":
        return await _program_reward(cfg, env.task, env.messages)
    if cfg.kind == "gym":
        from mua.gym import get_gym

        scorer = get_gym(cfg.name).score_conversation
        try:
            value = float(scorer(env.messages, env.task, env.ctx))
        except Exception as e:
            raise McpFault(f"gym {cfg.name}'s scorer raised {type(e).__name__}: {e}") from None
        if not math.isfinite(value):
            raise McpFault(f"gym {cfg.name}'s scorer gave {value}")
        return value
    conn, tool = env.judge
    args = env.task_arguments(tool)
    if "messages" in tool.schema.get("properties", {}):
        args["messages"] = json.dumps(env.messages, ensure_ascii=False)
    result = await env.hub.call(conn, tool.name, args)
    text = "\n".join(getattr(b, "text", "") or "" for b in result.content)
    value = None if result.is_error else reward_from_text(text)
    if value is None:
        raise McpFault(
            f'judge tool {tool.name} gave no reward (a number or {{"reward": x}}): {text[:300]}'
        )
    return value
