"""Tool-call parsing: Hermes blocks, bracket actions, auto; errors become readable parse_errors."""

from __future__ import annotations

import pytest

from mua.families.bracket import BRACKET_TOOL
from mua.families.tool_calls import action_as_message, parse_action


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


def test_hermes_unclosed_last_block_is_an_error_and_think_is_ignored():
    think = '<think>maybe <tool_call>{"name": "no"}</tool_call></think>'
    a = parse_action(think + '<tool_call>{"name": "yes", "arguments": {}}', "auto")
    assert a.tool_calls == []
    assert a.parse_errors == [
        "<tool_call> is not closed with </tool_call>; a call runs only when complete"
    ]
    closed = parse_action(think + '<tool_call>{"name": "yes", "arguments": {}}</tool_call>', "auto")
    assert [c.name for c in closed.tool_calls] == ["yes"]
    assert closed.text.startswith("<think>maybe <tool_call>")  # reasoning kept verbatim


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


@pytest.mark.parametrize(
    "text,calls,rest",
    [
        ('{"name": "lookup", "parameters": {"q": "x"}}', [("lookup", {"q": "x"})], ""),
        (
            '<|python_tag|>{"name": "a", "parameters": {"n": 1}}; {"name":"b","parameters":{}}'
            "<|eom_id|>",
            [("a", {"n": 1}), ("b", {})],
            "",
        ),
        (
            'Let me check.\n  {"name": "a", "parameters": {"n": 1}}\n\n'
            '{"name": "b", "arguments": "{\\"m\\": 2}"}\nDone.',
            [("a", {"n": 1}), ("b", {"m": 2})],
            "Let me check.\nDone.",
        ),
        (
            '<think>{"name": "no", "parameters": {}}</think>\n{"name": "yes", "parameters": {}} ok',
            [("yes", {})],
            '<think>{"name": "no", "parameters": {}}</think>\nok',
        ),
        ('The answer is {"name": "Bob"} as JSON.', [], 'The answer is {"name": "Bob"} as JSON.'),
    ],
)
def test_llama3_json_calls_separators_and_surrounding_text(text, calls, rest):
    a = parse_action(text, "llama3_json")
    assert [(c.name, c.arguments) for c in a.tool_calls] == calls
    assert a.text == rest and a.parse_errors == [] and a.raw == text
    assert [c.id for c in a.tool_calls] == [f"call_{i}" for i in range(len(calls))]
    if calls:
        msg = action_as_message(a)
        assert [c["function"]["name"] for c in msg["tool_calls"]] == [n for n, _ in calls]


@pytest.mark.parametrize(
    "text,needle",
    [
        ('{"name": "f", "parameters": {"a": 1}', "not valid JSON"),
        ('<|python_tag|>{"name": "f", "parameters": {"a": 1}', "not valid JSON"),
        ('{"parameters": {"a": 1}}', "name"),
        ('{"name": "f", "parameters": [1]}', "must be a JSON object"),
        ('<|python_tag|>brave_search.call(query="x")', "expected a JSON tool call"),
        ("<|python_tag|>", "expected a JSON tool call"),
    ],
)
def test_llama3_json_errors_say_what_is_wrong(text, needle):
    a = parse_action(text, "llama3_json")
    assert a.tool_calls == [] and len(a.parse_errors) == 1 and needle in a.parse_errors[0]
    assert action_as_message(a)["role"] == "assistant"


def test_llama3_json_reads_on_after_a_malformed_call():
    text = '{"name": "bad", "parameters": {"a": 1}\n{"name": "good", "parameters": {}}'
    a = parse_action(text, "llama3_json")
    assert [c.name for c in a.tool_calls] == ["good"]
    assert len(a.parse_errors) == 1 and "bad" in a.parse_errors[0]
    assert parse_action('{"name": "f", "parameters": {}}', "auto").tool_calls == []


def test_llama3_json_parse_error_reaches_the_model_as_an_observation():
    import asyncio

    from mua.gym.tools import ToolEnv, tool

    class Env(ToolEnv):
        @tool
        def lookup(self, q: str) -> str:
            """Look something up.

            Args:
                q: what to look up
            """
            return f"found {q}"

    action = parse_action(
        '{"name": "lookup", "parameters": {"q": "x"}}; {"name": "lookup", "parameters": {',
        "llama3_json",
    )
    messages, errors = asyncio.run(Env().call_tools(action))
    assert errors == {"parse_error": 1}
    assert messages[0]["name"] == "parser" and "not valid JSON" in messages[0]["content"]
    assert messages[1]["content"] == "found x"
