"""Each family's reader: strict about its format, forgiving about whitespace, and a malformed
call is a counted parse error (never a crash, never a silent empty action); `auto` picks the
family from the chat template."""

from __future__ import annotations

import logging

import pytest

from mua.families import FAMILIES, auto_family, detect_family, get_family
from mua.families.mistral import template_messages as mistral_messages
from mua.families.tool_calls import parse_action
from tests.unit.family_templates import TOOLS

MALFORMED = {
    "hermes": '<tool_call>{"name": "x", "arguments": {"a": </tool_call>',
    "qwen3_coder": "<tool_call>\n<function=lookup_order>\n<parameter=order_id>\nA-1\n",
    "glm4_5": "<tool_call>lookup_order\n<arg_key>order_id</arg_key>\n</tool_call>",
    "kimi_k2": "<|tool_calls_section_begin|><|tool_call_begin|>functions.x:0"
    '<|tool_call_argument_begin|>{"a": <|tool_call_end|><|tool_calls_section_end|>',
    "deepseek_v3_1": "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>x<｜tool▁sep｜>{oops"
    "<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
    "deepseek_v3_2": '<｜DSML｜function_calls>\n<｜DSML｜invoke name="x">\n'
    '<｜DSML｜parameter name="a" string="false">{oops</｜DSML｜parameter>\n'
    "</｜DSML｜invoke>\n</｜DSML｜function_calls>",
    "mistral": '[TOOL_CALLS][{"name": "x", "arguments": {"a": 1}',
    "gpt_oss": "<|channel|>commentary to=functions.x <|constrain|>json<|message|>{bad<|call|>",
    "llama3_json": '<|python_tag|>{"name": "x", "parameters": {"a": }',
}


@pytest.mark.parametrize("family", sorted(MALFORMED))
def test_malformed_call_is_a_parse_error(family):
    action = parse_action(MALFORMED[family], family, TOOLS)
    assert action.tool_calls == []
    assert len(action.parse_errors) == 1 and action.parse_errors[0]


def test_every_family_has_a_malformed_case():
    assert set(MALFORMED) == set(FAMILIES)


@pytest.mark.parametrize(
    ("family", "text"),
    [
        (
            "qwen3_coder",
            "<tool_call><function=lookup_order><parameter=order_id>A-1042</parameter>"
            "</function></tool_call>",
        ),
        (
            "qwen3_coder",
            "  <tool_call>\n\n <function=lookup_order>\n  <parameter=order_id>\nA-1042\n"
            "</parameter>\n</function>\n</tool_call>\n",
        ),
        (
            "glm4_5",
            "<tool_call> lookup_order <arg_key> order_id </arg_key>  <arg_value>A-1042"
            "</arg_value></tool_call>",
        ),
        (
            "kimi_k2",
            "<|tool_calls_section_begin|>\n<|tool_call_begin|> functions.lookup_order:0 "
            '<|tool_call_argument_begin|> {"order_id":"A-1042"} <|tool_call_end|>\n'
            "<|tool_calls_section_end|>",
        ),
        (
            "deepseek_v3_1",
            "<｜tool▁calls▁begin｜>\n<｜tool▁call▁begin｜>lookup_order<｜tool▁sep｜>\n"
            '{"order_id": "A-1042"}\n<｜tool▁call▁end｜>\n<｜tool▁calls▁end｜>',
        ),
        ("mistral", '[TOOL_CALLS] [ {"name":"lookup_order","arguments":{"order_id":"A-1042"}} ]\n'),
        (
            "gpt_oss",
            "<|channel|>commentary to=functions.lookup_order <|constrain|>json<|message|>"
            '{"order_id": "A-1042"}<|call|>',
        ),
    ],
)
def test_whitespace_and_layout_variants_are_read(family, text):
    action = parse_action(text, family, TOOLS)
    assert action.parse_errors == []
    assert [(c.name, c.arguments) for c in action.tool_calls] == [
        ("lookup_order", {"order_id": "A-1042"})
    ]


def test_text_values_are_typed_by_the_schema_else_json_else_kept():
    text = (
        "<tool_call>\n<function=track_parcel>\n<parameter=tracking_no>\n42\n</parameter>\n"
        "<parameter=attempts>\n3\n</parameter>\n<parameter=express>\nFalse\n</parameter>\n"
        '<parameter=legs>\n["x"]\n</parameter>\n<parameter=note>\n7\n</parameter>\n'
        "<parameter=other>\nnot json\n</parameter>\n</function>\n</tool_call>"
    )
    (call,) = parse_action(text, "qwen3_coder", TOOLS).tool_calls
    assert call.arguments == {
        "tracking_no": "42",  # declared string: kept as written
        "attempts": 3,
        "express": False,
        "legs": ["x"],
        "note": 7,  # undeclared: JSON
        "other": "not json",  # undeclared, not JSON: the string
    }
    wrong = (
        "<tool_call>track_parcel<arg_key>attempts</arg_key><arg_value>many</arg_value></tool_call>"
    )
    (call,) = parse_action(wrong, "glm4_5", TOOLS).tool_calls
    assert call.arguments == {"attempts": "many"}  # left for the tool's own argument check


def test_reasoning_is_never_read_for_calls():
    text = "<tool_call>\n<function=a>\n</function>\n</tool_call>\n</think>\nJust text."
    action = parse_action(text, "qwen3_coder")
    assert action.tool_calls == [] and action.parse_errors == []
    assert action.text.endswith("Just text.")


def test_harmony_channels():
    final = parse_action(
        "<|channel|>analysis<|message|>think<|end|><|start|>assistant<|channel|>final"
        "<|message|>Done.<|return|>",
        "gpt_oss",
    )
    assert final.text == "Done." and final.tool_calls == [] and final.parse_errors == []
    call = parse_action(
        "<|channel|>analysis<|message|>Need it.<|end|><|start|>assistant to=functions.f"
        '<|channel|>commentary json<|message|>{"a": 1}<|call|>',
        "gpt_oss",
    )
    assert call.text == "Need it." and [(c.name, c.arguments) for c in call.tool_calls] == [
        ("f", {"a": 1})
    ]
    browser = parse_action(
        '<|channel|>commentary to=browser.search<|message|>{"q": 1}<|call|>', "gpt_oss"
    )
    assert browser.tool_calls == [] and "functions.NAME" in browser.parse_errors[0]
    assert parse_action("plain answer", "gpt_oss").text == "plain answer"


def test_mistral_ids_are_nine_characters_and_results_follow_them():
    action = parse_action(
        '[TOOL_CALLS][{"name": "a", "arguments": {}, "id": "abcDEF123"}, {"name": "b", '
        '"arguments": {}, "id": "short"}]',
        "mistral",
    )
    assert [c.id for c in action.tool_calls] == ["abcDEF123", "call00001"]
    msgs = mistral_messages(
        [
            {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "a"}}] * 2},
            {"role": "tool", "content": "1"},
            {"role": "tool", "content": "2"},
        ]
    )
    assert [c["id"] for c in msgs[0]["tool_calls"]] == ["call00000", "call00001"]
    assert [m["tool_call_id"] for m in msgs[1:]] == ["call00000", "call00001"]


def test_auto_reads_the_templates_family_then_bracket(caplog):
    xml = "<tool_call>\n<function=f>\n<parameter=a>\n1\n</parameter>\n</function>\n</tool_call>"
    template = "... <function=x> ... <parameter=y> ... <tool_call> ..."
    assert detect_family(template).name == "qwen3_coder"
    assert [c.name for c in parse_action(xml, "auto", chat_template=template).tool_calls] == ["f"]
    bracket = parse_action("[answer] 42", "auto", chat_template=template)
    assert bracket.tool_calls[0].arguments == {"choice": "answer", "content": "42"}
    with caplog.at_level(logging.WARNING, logger="mua.families"):
        unknown = "{{ messages }} unknown-template-for-the-warning-test"
        for _ in range(3):
            assert auto_family(unknown) is None
            action = parse_action(
                '<tool_call>{"name": "g"}</tool_call>', "auto", chat_template=unknown
            )
            assert [c.name for c in action.tool_calls] == ["g"]
    warnings = [r.getMessage() for r in caplog.records if "model.tool_parser" in r.getMessage()]
    assert len(warnings) == 1 and "qwen3_coder" in warnings[0]


def test_names_and_aliases():
    assert get_family("qwen3_5").name == "qwen3_coder"
    assert get_family("harmony").name == "gpt_oss"
    with pytest.raises(ValueError, match="unknown model family 'nope'"):
        get_family("nope")
    with pytest.raises(ValueError, match="unknown tool parser"):
        parse_action("x", "nope")


def test_recipe_accepts_every_family_name():
    from pydantic import ValidationError

    from mua.config.model import ModelConfig

    for name in (*FAMILIES, "auto", "bracket"):
        assert ModelConfig(tool_parser=name).tool_parser == name
    with pytest.raises(ValidationError, match="qwen3_coder"):
        ModelConfig(tool_parser="qwen4")


def test_an_endpoint_reply_with_calls_as_text_is_read_with_the_family_reader():
    """A server without a tool parser returns the model's markup as content: the OpenAI agent
    reads it with `model.tool_parser`, typed by the tools it offered."""
    from types import SimpleNamespace

    from mua.rollout.openai_policy import message_from_reply

    reply = SimpleNamespace(
        content="<tool_call>\n<function=track_parcel>\n<parameter=tracking_no>\n0042\n"
        "</parameter>\n<parameter=attempts>\n2\n</parameter>\n</function>\n</tool_call>",
        tool_calls=None,
    )
    message = message_from_reply(reply, "qwen3_coder", TOOLS)
    assert "parse_errors" not in message
    (call,) = message["tool_calls"]
    assert call["function"] == {
        "name": "track_parcel",
        "arguments": {"tracking_no": "0042", "attempts": 2},
    }


PIECES = [
    "<tool_call>",
    "</tool_call>",
    "<function=f>",
    "</function>",
    "<parameter=a>",
    "</parameter>",
    "<arg_key>",
    "</arg_key>",
    "<arg_value>",
    "</arg_value>",
    "<|tool_calls_section_begin|>",
    "<|tool_calls_section_end|>",
    "<|tool_call_begin|>",
    "<|tool_call_argument_begin|>",
    "<|tool_call_end|>",
    "functions.f:0",
    "<｜tool▁calls▁begin｜>",
    "<｜tool▁call▁begin｜>",
    "<｜tool▁sep｜>",
    "<｜tool▁call▁end｜>",
    "<｜tool▁calls▁end｜>",
    "<｜DSML｜function_calls>",
    "</｜DSML｜function_calls>",
    '<｜DSML｜invoke name="f">',
    "</｜DSML｜invoke>",
    '<｜DSML｜parameter name="a" string="false">',
    '<｜DSML｜parameter name="a" string="true">',
    "</｜DSML｜parameter>",
    "[TOOL_CALLS]",
    "<|start|>",
    "<|channel|>",
    "<|message|>",
    "<|call|>",
    "<|end|>",
    " to=functions.f",
    "commentary",
    "final",
    "<think>",
    "</think>",
    '{"name": "f", "arguments": {"a": 1}}',
    '[{"name": "f"}]',
    '{"a": [1, {"b": ',
    "\n",
    " ",
    "f",
    "}",
    "]",
]


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_readers_never_raise_on_random_markup(family):
    import random

    rng = random.Random(family)
    read = get_family(family).parse
    for _ in range(400):
        text = "".join(rng.choice(PIECES) for _ in range(rng.randint(0, 12)))
        action = read(text, TOOLS)  # directly: parse_action would hide a reader bug
        assert all(isinstance(e, str) and e for e in action.parse_errors)
        assert all(isinstance(c.arguments, dict) for c in action.tool_calls)
