"""Prefix stability of the tiny chat template in token ids, and the checker that reports breaks."""

from __future__ import annotations

import json
import random

import pytest

from mua.errors import RunFailure
from mua.models import check_prefix_stability, load_tokenizer, render_delta_ids, render_ids

WORDS = "the order is late ok 42 3.5 Paris ✓ naïve café {json} [x] a_b don't \t tab".split(" ")
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": n,
            "description": f"{n} tool",
            "parameters": {"type": "object", "properties": {}},
        },
    }
    for n in ("lookup", "calc", "book")
]


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer("tiny:qwen3-1m")


def _text(rng: random.Random, leading_space_ok: bool) -> str:
    words = [rng.choice(WORDS) for _ in range(rng.randint(0, 6))]
    text = rng.choice([" ", "\n", "", ". "]).join(words)
    if rng.random() < 0.2:
        text += rng.choice(["\n", "  ", "\n\n", "!"])
    if leading_space_ok and rng.random() < 0.2:
        text = rng.choice([" ", "\n", "\t"]) + text
    return text


def _assistant(rng: random.Random) -> dict:
    content = _text(rng, leading_space_ok=False).lstrip()
    if rng.random() < 0.2:
        content = f"<think>{_text(rng, True)}</think>{content}"
    message = {"role": "assistant", "content": content if content or rng.random() < 0.5 else None}
    if rng.random() < 0.5:
        calls = []
        for _ in range(rng.randint(1, 2)):
            args = {rng.choice(["q", "x", "n"]): rng.choice([1, "two", [3], {"k": "v"}])}
            args_value = json.dumps(args) if rng.random() < 0.3 else args
            call = {"name": rng.choice(TOOLS)["function"]["name"], "arguments": args_value}
            calls.append({"type": "function", "function": call} if rng.random() < 0.5 else call)
        message["tool_calls"] = calls
    return message


def random_conversation(rng: random.Random) -> dict:
    messages = []
    if rng.random() < 0.6:
        messages.append({"role": "system", "content": _text(rng, True) or "sys"})
    for _ in range(rng.randint(1, 4)):
        messages.append({"role": rng.choice(["user", "user", "env"]), "content": _text(rng, True)})
        assistant = _assistant(rng)
        messages.append(assistant)
        for _ in assistant.get("tool_calls", []):
            messages.append({"role": "tool", "content": _text(rng, True)})
    return {"messages": messages, "tools": TOOLS if rng.random() < 0.5 else None}


def test_thousand_random_conversations_render_prefix_stably_in_token_ids(tok):
    rng = random.Random(1234)
    checked = 0
    for _ in range(1000):
        conv = random_conversation(rng)
        messages, tools = conv["messages"], conv["tools"]
        whole = render_ids(tok, messages, tools)
        for count in range(1, len(messages)):
            prefix = render_ids(tok, messages[:count], tools)
            assert whole[: len(prefix)] == prefix, (messages[: count + 1], tools)
            if messages[count]["role"] == "assistant":
                prompt = render_ids(tok, messages[:count], tools, add_generation_prompt=True)
                assert whole[: len(prompt)] == prompt, (messages[: count + 1], tools)
            checked += 1
    assert checked > 3000


def test_checker_finds_nothing_on_the_tiny_template(tok):
    rng = random.Random(7)
    assert check_prefix_stability(tok, [random_conversation(rng) for _ in range(50)]) == []


GROUPING_TEMPLATE = (
    "{%- for m in messages -%}"
    "{%- if m.role == 'tool' -%}"
    "{%- if loop.first or loop.previtem.role != 'tool' -%}{{- '<|im_start|>user' -}}{%- endif -%}"
    "{{- '\\n<tool_response>\\n' + m.content + '\\n</tool_response>' -}}"
    "{%- if loop.last or loop.nextitem.role != 'tool' -%}{{- '<|im_end|>\\n' -}}{%- endif -%}"
    "{%- else -%}{{- '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' -}}{%- endif -%}"
    "{%- endfor -%}"
)


def test_checker_reports_a_template_that_groups_tool_messages():
    tok = load_tokenizer("tiny:qwen3-1m")
    tok.chat_template = GROUPING_TEMPLATE
    conv = [
        {"role": "user", "content": "go"},
        {"role": "tool", "content": "a"},
        {"role": "tool", "content": "b"},
    ]
    problems = check_prefix_stability(tok, [conv])
    assert len(problems) == 1
    assert problems[0].startswith("conversation 0: the first 2 message(s)")
    with pytest.raises(RunFailure, match="not prefix-stable"):
        render_delta_ids(tok, conv[:2], conv[2:])


def test_checker_reports_a_reply_whose_leading_newline_merges_with_the_prompt(tok):
    conv = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "\n\nhello"}]
    problems = check_prefix_stability(tok, [{"messages": conv, "tools": None}])
    assert len(problems) == 1 and "with the generation prompt" in problems[0]


def test_render_delta_ids_is_exactly_the_appended_suffix(tok):
    history = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]
    new = [{"role": "tool", "content": "42"}]
    delta = render_delta_ids(tok, history, new, tools=TOOLS, add_generation_prompt=True)
    assert render_ids(tok, history, TOOLS) + delta == render_ids(
        tok, history + new, TOOLS, add_generation_prompt=True
    )
    assert tok.decode(delta) == (
        "<|im_start|>user\n<tool_response>\n42\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
    )
