"""The committed tiny tokenizer: vocabulary, special tokens, reproducible build, chat template."""

from __future__ import annotations

import json

import pytest

from mua.models import load_tokenizer, render_ids, render_text
from mua.models.build_tokenizer import (
    ASSET_FILES,
    CHAT_TEMPLATE_PATH,
    CONTROL_TOKENS,
    MARKUP_TOKENS,
    TOKENIZER_DIR,
    check_assets,
)

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather for a city.",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer("tiny:qwen3-1m")


def test_vocabulary_is_exactly_2000_with_single_id_special_tokens(tok):
    assert len(tok) == 2000
    for token in CONTROL_TOKENS + MARKUP_TOKENS:
        ids = tok.encode(token, add_special_tokens=False)
        assert len(ids) == 1, token
        assert tok.convert_ids_to_tokens(ids[0]) == token
    assert tok.eos_token == "<|im_end|>" and tok.eos_token_id == 2
    assert tok.pad_token == "<|endoftext|>" and tok.pad_token_id == 0
    assert tok.bos_token is None


def test_text_round_trips_and_markup_survives_skipping_special_tokens(tok):
    text = 'Héllo wörld ✓ 12345\n<tool_call>\n{"name": "f", "arguments": {}}\n</tool_call>'
    ids = tok.encode(text, add_special_tokens=False)
    assert tok.decode(ids) == text
    rendered = render_ids(tok, [{"role": "assistant", "content": "<think>a</think>b"}])
    kept = tok.decode(rendered, skip_special_tokens=True)
    assert "<think>a</think>b" in kept and "<|im_end|>" not in kept and "<|im_start|>" not in kept


def test_build_script_reproduces_the_committed_files(tmp_path, capsys):
    assert check_assets(TOKENIZER_DIR)
    for name in ASSET_FILES:
        (tmp_path / name).write_bytes((TOKENIZER_DIR / name).read_bytes())
    (tmp_path / "tokenizer.json").write_text("{}")
    assert not check_assets(tmp_path)
    assert "tokenizer.json differs from a fresh build" in capsys.readouterr().out


def test_tokenizer_config_carries_the_jinja_template():
    config = json.loads((TOKENIZER_DIR / "tokenizer_config.json").read_text())
    assert config["chat_template"] == CHAT_TEMPLATE_PATH.read_text()


def test_render_ids_returns_flat_ints_matching_the_text(tok):
    messages = [{"role": "user", "content": "hi"}]
    ids = render_ids(tok, messages, add_generation_prompt=True)
    assert isinstance(ids, list) and all(type(i) is int for i in ids)
    assert tok.decode(ids) == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"


def test_template_renders_turns_tools_calls_and_tool_results(tok):
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather in Oslo?"},
        {
            "role": "assistant",
            "content": "Checking.",
            "tool_calls": [
                {
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": {"city": "Oslo"}},
                },
                {"name": "get_weather", "arguments": '{"city": "Rome"}'},
            ],
        },
        {"role": "tool", "content": "cold"},
        {"role": "tool", "content": "warm"},
        {"role": "env", "content": "2 turns left"},
        {"role": "assistant", "content": "Oslo is cold."},
    ]
    text = render_text(tok, messages, tools=TOOLS)
    system, rest = text.split("<|im_end|>\n", 1)
    assert system.startswith("<|im_start|>system\nBe brief.\n\n# Tools\n")
    assert "<tools>\n" + json.dumps(TOOLS[0]) + "\n</tools>" in system
    assert (
        '<tool_call>\n{"name": <function-name>, "arguments": <arguments-json-object>}\n</tool_call>'
        in system
    )
    assert rest == (
        "<|im_start|>user\nWeather in Oslo?<|im_end|>\n"
        "<|im_start|>assistant\nChecking.\n"
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>\n'
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Rome"}}\n</tool_call><|im_end|>\n'
        "<|im_start|>user\n<tool_response>\ncold\n</tool_response><|im_end|>\n"
        "<|im_start|>user\n<tool_response>\nwarm\n</tool_response><|im_end|>\n"
        "<|im_start|>env\n2 turns left<|im_end|>\n"
        "<|im_start|>assistant\nOslo is cold.<|im_end|>\n"
    )


def test_template_without_system_or_tools_has_no_system_turn(tok):
    text = render_text(tok, [{"role": "user", "content": "x"}])
    assert text == "<|im_start|>user\nx<|im_end|>\n"
    parts = [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]
    assert (
        render_text(tok, [{"role": "user", "content": parts}]) == "<|im_start|>user\nab<|im_end|>\n"
    )
    with_tools = render_text(tok, [{"role": "user", "content": "x"}], tools=TOOLS)
    assert with_tools.startswith("<|im_start|>system\nYou are a helpful assistant.\n\n# Tools")


def test_tool_call_without_content_follows_the_generation_prompt(tok):
    call = {"role": "assistant", "content": None, "tool_calls": [{"name": "f", "arguments": {}}]}
    text = render_text(tok, [call])
    assert text == (
        '<|im_start|>assistant\n<tool_call>\n{"name": "f", "arguments": {}}\n</tool_call><|im_end|>\n'
    )
