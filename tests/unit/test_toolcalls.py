"""Tool-call parsing: Hermes blocks, bracket actions, auto; errors become readable parse_errors."""

from __future__ import annotations

import pytest

from mua.rollout.toolcalls import BRACKET_TOOL, action_as_message, parse_action


def test_hermes_several_calls_with_text_and_whitespace():
    text = (
        'Let me check.\n<tool_call>\n{"name": "lookup", "arguments": {"q": "x"}}\n</tool_call>\n'
        '<tool_call>  {"name":"add","arguments":"{\\"a\\": 2}"}  </tool_call> trailing'
    )
    a = parse_action(text, "hermes")
    assert [(c.name, c.arguments) for c in a.tool_calls] == [
        ("lookup", {"q": "x"}),
        ("add", {"a": 2}),
    ]
    assert a.text == "Let me check.\n\n trailing" and a.parse_errors == []
    msg = action_as_message(a)
    assert msg["tool_calls"][1]["function"] == {"name": "add", "arguments": {"a": 2}}


@pytest.mark.parametrize(
    "body,needle",
    [
        ('<tool_call>{"name": "f", "arguments": {"a": 1}</tool_call>', "not valid JSON"),
        ("<tool_call></tool_call>", "empty"),
        ('<tool_call>["f"]</tool_call>', "JSON object"),
        ('<tool_call>{"arguments": {}}</tool_call>', "name"),
        ('<tool_call>{"name": "f", "arguments": [1]}</tool_call>', "must be a JSON object"),
        ('<tool_call>{"name": "f", "arguments": "nope"}</tool_call>', "not JSON"),
        ('<tool_call>{"name": "f"} extra</tool_call>', "unexpected text"),
        ("done </tool_call>", "without a matching"),
    ],
)
def test_hermes_errors_say_what_is_wrong(body, needle):
    a = parse_action(body, "hermes")
    assert a.tool_calls == [] and len(a.parse_errors) == 1 and needle in a.parse_errors[0]


def test_hermes_unclosed_last_block_is_read_and_think_is_ignored():
    a = parse_action(
        '<think>maybe <tool_call>{"name": "no"}</tool_call></think><tool_call>{"name": "yes", "arguments": {}}',
        "auto",
    )
    assert [c.name for c in a.tool_calls] == ["yes"]
    assert a.text.startswith("<think>maybe <tool_call>")  # reasoning kept verbatim for re-rendering


@pytest.mark.parametrize(
    "text,choice,content",
    [
        ("[answer] 7", "answer", "7"),
        ("  [ Answer ]   12 is my guess", "answer", "12 is my guess"),
        ("I think [search] capital of France\n[answer] Paris", "search", "capital of France"),
        ("[action] Do you like cats?", "action", "Do you like cats?"),
        ("[finish] thanks", "finish", ""),
    ],
)
def test_bracket_actions(text, choice, content):
    a = parse_action(text, "bracket")
    (call,) = a.tool_calls
    assert call.name == BRACKET_TOOL and call.arguments == {"choice": choice, "content": content}
    assert action_as_message(a) == {"role": "assistant", "content": text}  # verbatim


def test_plain_text_and_auto():
    assert parse_action("just talking", "auto").tool_calls == []
    assert parse_action("[answer] 3", "hermes").tool_calls == []
    assert parse_action("[answer] 3", "auto").tool_calls[0].arguments["choice"] == "answer"
    assert (
        parse_action('<tool_call>{"name": "f", "arguments": {}}</tool_call> [answer] 3', "auto")
        .tool_calls[0]
        .name
        == "f"
    )
    with pytest.raises(ValueError):
        parse_action("x", "xml")
