"""Render/parse matrix: every family's own chat template (from ../shared/data/chat_templates)
renders a conversation with two tool calls and their results through transformers'
`apply_chat_template`; the family's reader gets the same calls back from the assistant text,
and every other family's reader does not."""

from __future__ import annotations

import pytest

from mua.families import FAMILIES, detect_family, for_template
from mua.models.chat import render_text
from mua.rollout.toolcalls import parse_action
from tests.unit.family_templates import CALLS, TEMPLATES, TOOLS, conversation, family_tokenizer

_ENDS = ("<|im_end|>", "<|eot_id|>", "<|call|>", "<|return|>", "<|end|>", "</s>", "<|user|>")


def _render(tok, msgs, gen):
    return render_text(tok, for_template(tok.chat_template, msgs), TOOLS, gen)


def assistant_bodies(file: str) -> list[str]:
    """The text each tool-calling assistant message renders to after its generation prompt."""
    tok = family_tokenizer(file)
    msgs = conversation(file)
    bodies = []
    for k, msg in enumerate(msgs):
        if msg["role"] != "assistant" or not msg.get("tool_calls"):
            continue
        prompt, full = _render(tok, msgs[:k], True), _render(tok, msgs[: k + 1], False)
        assert full.startswith(prompt), f"{file}: the assistant turn rewrites its prompt"
        body = full[len(prompt) :].rstrip()
        for end in (*_ENDS, tok.eos_token):
            body = body.removesuffix(end)
        bodies.append(body)
    return bodies


def _calls(bodies: list[str], parser: str) -> tuple[list[tuple[str, dict]], list[str]]:
    calls, errors = [], []
    for body in bodies:
        action = parse_action(body, parser, TOOLS)
        calls += [(c.name, c.arguments) for c in action.tool_calls]
        errors += action.parse_errors
    return calls, errors


@pytest.mark.parametrize("file", sorted(TEMPLATES))
def test_template_round_trips_its_calls(file):
    family = TEMPLATES[file][0]
    assert detect_family(family_tokenizer(file).chat_template).name == family
    calls, errors = _calls(assistant_bodies(file), family)
    assert errors == []
    assert calls == [(name, args) for name, args in CALLS]


@pytest.mark.parametrize(
    ("file", "other"),
    [(f, o) for f in sorted(TEMPLATES) for o in FAMILIES if o != TEMPLATES[f][0]],
)
def test_another_familys_reader_does_not_read_them(file, other):
    calls, _ = _calls(assistant_bodies(file), other)
    assert calls != [(name, args) for name, args in CALLS]


START = {
    "hermes": "<tool_call>",
    "qwen3_coder": "<tool_call>",
    "glm4_5": "<tool_call>",
    "kimi_k2": "<|tool_calls_section_begin|>",
    "deepseek_v3_1": "<｜tool▁calls▁begin｜>",
    "mistral": "[TOOL_CALLS]",
    "gpt_oss": "<|message|>",
    "llama3_json": '{"name": ',
}


@pytest.mark.parametrize("file", sorted(TEMPLATES))
def test_a_call_cut_anywhere_is_read_or_reported_never_silently_dropped(file):
    """Every prefix of the rendered calls (a turn cut by the token budget): once the call has
    started, the reader returns calls or parse errors, and it never raises."""
    family = TEMPLATES[file][0]
    body = assistant_bodies(file)[0]
    start = body.index(START[family])
    for cut in range(start + len(START[family]), len(body)):
        action = parse_action(body[:cut], family, TOOLS)
        assert action.tool_calls or action.parse_errors, (cut, body[:cut])
