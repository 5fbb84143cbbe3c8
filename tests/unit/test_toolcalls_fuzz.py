"""Fuzz: thousands of random and adversarial assistant outputs through the parsers and every gym
present; no exception may escape (a UserFailure from an LLM judge is the only allowed raise).
The adversarial set (seeded) aims at the JSON reader's limits: nesting past the recursion limit,
integers past 4,300 digits, escaped and raw surrogates."""

from __future__ import annotations

import asyncio
import json
import random

import pytest

from mua.errors import MuaError
from mua.families.tool_calls import parse_action, read_native_calls
from mua.gym import GymContext, UserFailure, get_gym, list_gyms

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
            text = adversarial_output(rng) if i % 5 == 0 else random_output(rng)
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


# -- adversarial outputs: the standard library's JSON limits, nesting, huge numbers, surrogates --

NUM_ADVERSARIAL = 10_000
CALL_OPENERS = (
    "<tool_call>",
    '<tool_call>{"name": "f", "arguments": ',
    '{"name": "f", "parameters": ',
    '<|python_tag|>{"name": "f", "arguments": ',
    '<tool_call>{"name": "f", "arguments": "',
    "[answer] ",
    "",
)


def _bomb(rng: random.Random) -> str:
    """Something a JSON reader chokes on: deep nesting, an endless number, escapes, junk."""
    depth = rng.choice((33, 999, 1_000, 1_050, 2_000))
    kind = rng.randrange(9)
    if kind == 0:
        return "[" * depth
    if kind == 1:
        return '{"a": ' * depth
    if kind == 2:
        return "[" * depth + "]" * depth
    if kind == 3:
        return '{"a": ' * depth + "1" + "}" * depth
    if kind == 4:
        return rng.choice(("-", "")) + "9" * rng.choice((4_300, 4_301, 4_400))
    if kind == 5:
        return '"' + rng.choice(("\\ud800", "\\udfff", "\\ud83d\\ude00", "\\u0000")) * 3 + '"'
    if kind == 6:
        return rng.choice(("\ud800", "\udc00", "\ud83d\ude00", "\x00")) * rng.randint(1, 5)
    if kind == 7:
        return '\\"[' * depth
    return "1e" + "9" * rng.randint(1, 400)


def adversarial_output(rng: random.Random) -> str:
    parts = [rng.choice(CALL_OPENERS), _bomb(rng)]
    for _ in range(rng.randint(0, 3)):
        parts.append(rng.choice(PIECES) if rng.random() < 0.75 else _bomb(rng))
    if rng.random() < 0.5:
        parts.append(rng.choice(("}", "}}", '"}', "</tool_call>", "<|eom_id|>")))
    return "".join(parts)


def _assert_usable(action) -> None:
    assert isinstance(action.parse_errors, list)
    for call in action.tool_calls:
        assert isinstance(call.arguments, dict)
        # what the transcript, caches and results files do with a call must work
        json.dumps({"name": call.name, "arguments": call.arguments}).encode("utf-8")
    action.text.encode("utf-8")


@pytest.mark.parametrize("parser", ["hermes", "bracket", "llama3_json", "auto"])
def test_text_parsers_turn_10000_adversarial_outputs_into_parse_errors(parser):
    rng = random.Random(f"adversarial/{parser}")
    read_errors = 0
    for _ in range(NUM_ADVERSARIAL):
        action = parse_action(adversarial_output(rng), parser)
        _assert_usable(action)
        read_errors += bool(action.parse_errors)
    if parser != "bracket":  # bracket actions carry free text: nothing to refuse
        assert read_errors > NUM_ADVERSARIAL // 4  # the bombs were reported, not dropped


def test_native_call_reader_turns_10000_adversarial_arguments_into_parse_errors():
    rng = random.Random("adversarial/native")
    refused = 0
    for _ in range(NUM_ADVERSARIAL):
        arguments = _bomb(rng) if rng.random() < 0.8 else adversarial_output(rng)
        raw = {
            "id": "c",
            "function": {"name": rng.choice(("f", "\ud800", "", None)), "arguments": arguments},
        }
        calls, errors = read_native_calls([raw, None, 3])
        assert len(calls) + len(errors) == 3
        for call in calls:
            json.dumps(call).encode("utf-8")
        refused += len(errors) - 2
    assert refused > NUM_ADVERSARIAL // 2


def test_the_reported_crashes_are_parse_errors():
    deep = parse_action("<tool_call>" + "[" * 1000 + "</tool_call>", "hermes")
    assert deep.tool_calls == [] and "nested too deeply" in deep.parse_errors[0]
    digits = parse_action(
        '<tool_call>{"name": "f", "arguments": {"n": ' + "9" * 4301 + "}}</tool_call>"
    )
    assert digits.tool_calls == [] and "too many digits" in digits.parse_errors[0]
    llama = parse_action('{"name": "f", "parameters": ' + "[" * 5000, "llama3_json")
    assert llama.tool_calls == [] and "nested too deeply" in llama.parse_errors[0]
    nested = parse_action(
        '<tool_call>{"name": "f", "arguments": ' + '{"a": ' * 40 + "1" + "}" * 41 + "</tool_call>"
    )
    assert nested.tool_calls == [] and "levels deep" in nested.parse_errors[0]
    escaped = parse_action('<tool_call>{"name": "f", "arguments": {"s": "\\ud800"}}</tool_call>')
    assert escaped.tool_calls[0].arguments == {"s": "\ufffd"}


def test_a_reader_that_raises_costs_one_parse_error_not_the_run(monkeypatch):
    import mua.families.tool_calls as toolcalls

    def broken(text):
        raise KeyError("reader bug")

    monkeypatch.setattr(toolcalls, "parse_hermes", broken)
    action = parse_action("<tool_call>{}</tool_call> and text", "auto")
    assert action.tool_calls == [] and "KeyError" in action.parse_errors[0]
    assert action.raw == "<tool_call>{}</tool_call> and text"
    with pytest.raises(ValueError, match="unknown tool parser"):
        parse_action("x", "yaml")  # a wrong parser name is a programming error
