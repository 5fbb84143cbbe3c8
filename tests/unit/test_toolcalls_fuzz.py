"""Fuzz: thousands of random and adversarial assistant outputs through the parser and every gym
present; no exception may escape (a UserFailure from an LLM judge is the only allowed raise)."""

from __future__ import annotations

import asyncio
import random

import pytest

from mua.errors import MuaError
from mua.gym import GymContext, UserFailure, get_gym, list_gyms
from mua.rollout.toolcalls import parse_action

PIECES = [
    "<tool_call>",
    "</tool_call>",
    "<think>",
    "</think>",
    "[answer]",
    "[search]",
    "[action]",
    "[finish]",
    "[",
    "]",
    "{",
    "}",
    '"name"',
    '"arguments"',
    ":",
    ",",
    '"interact_with_env"',
    '"choice"',
    '"content"',
    '"answer"',
    "null",
    "true",
    "1e999",
    "-0",
    "NaN",
    "\\u0000",
    "\x00",
    "\n",
    "  ",
    "7",
    "16",
    "-3",
    "99999999999999999999",
    '{"name": "interact_with_env", "arguments": {"choice": "answer", "content": "5"}}',
    '{"name": "interact_with_env", "arguments": {"choice": 3}}',
    '{"name": "rm -rf", "arguments": {}}',
    '{"name": "interact_with_env", "arguments": "{\\"choice\\": \\"finish\\"}"}',
    "é",
    "中文",
    "🙂",
    "<|im_end|>",
    "'",
    '"',
    "\\",
    "```json",
    "```",
    "<|python_tag|>",
    "<|eom_id|>",
    "<|eot_id|>",
    ";",
    '"parameters"',
    '{"name": "interact_with_env", "parameters": {"choice": "answer", "content": "5"}}',
    '\n{"name": "interact_with_env", "parameters": {"choice": "finish"}}; ',
    '{"name": "interact_with_env", "parameters": {',
]


def random_output(rng: random.Random) -> str:
    if rng.random() < 0.2:
        return "".join(chr(rng.randint(0, 0x2FFF)) for _ in range(rng.randint(0, 40)))
    return "".join(rng.choice(PIECES) for _ in range(rng.randint(0, 12)))


def test_parser_never_raises_on_2000_outputs():
    rng = random.Random(0)
    for _ in range(3000):
        text = random_output(rng)
        for parser in ("hermes", "bracket", "llama3_json", "auto"):
            action = parse_action(text, parser)
            assert isinstance(action.parse_errors, list)
            assert all(isinstance(c.arguments, dict) for c in action.tool_calls)


def _gyms_with_tasks():
    out = []
    for name in list_gyms():
        try:
            spec = get_gym(name)
            tasks = [t for split in spec.build_tasks(None, 0, {}).values() for t in split][:5]
        except (MuaError, ImportError, FileNotFoundError, AttributeError, TypeError):
            continue  # a gym still being built, or one without built-in tasks
        if tasks:
            out.append((name, spec, tasks))
    return out


@pytest.mark.parametrize("count_guess,count_other", [(2000, 200)])
def test_gyms_never_raise_on_adversarial_outputs(count_guess, count_other):
    gyms = _gyms_with_tasks()
    assert "guess" in [g[0] for g in gyms]
    rng = random.Random(1)

    async def fuzz(spec, tasks, count):
        env, steps = None, 0
        for i in range(count):
            if env is None or steps >= 8:
                if env is not None:
                    await env.close()
                env = spec.make_env(GymContext())
                await env.reset(tasks[i % len(tasks)])
                steps = 0
            text = random_output(rng)
            parser = "llama3_json" if i % 2 else "auto"
            try:
                result = await env.step(parse_action(text, parser))
            except UserFailure:
                env = None
                continue
            steps += 1
            assert all(isinstance(m.get("content"), str) for m in result.messages), (
                spec.name,
                text,
            )
            if result.done:
                steps = 8
        if env is not None:
            await env.close()

    for name, spec, tasks in gyms:
        asyncio.run(fuzz(spec, tasks, count_guess if name == "guess" else count_other))
