"""Render/parse matrix: every family's own chat template (from ../shared/data/chat_templates)
renders a conversation with two tool calls and their results through transformers'
`apply_chat_template`; the family's reader gets the same calls back from the assistant text,
and every other family's reader does not. A call cut anywhere, and each family's malformed
turns, have one exact outcome: which calls are read, which parse errors."""

from __future__ import annotations

import pytest

from mua.families import FAMILIES, detect_family, for_template
from mua.families.tool_calls import parse_action
from mua.models.chat import render_text
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
# where a family's calls close one by one (the others: only the whole body is complete)
CLOSE = {"hermes": "</tool_call>", "qwen3_coder": "</tool_call>", "glm4_5": "</tool_call>"}


def _cut_outcome(family: str, prefix: str) -> tuple[list[tuple[str, dict]], int]:
    """What a reader must make of a prefix of the rendered calls: the calls closed before the
    cut, and one parse error when the cut is inside a call."""
    close = CLOSE.get(family)
    if close is None:
        return [], 1
    closed = prefix.count(close)
    return [(name, args) for name, args in CALLS[:closed]], int(
        prefix.count(START[family]) > closed
    )


@pytest.mark.parametrize("file", sorted(TEMPLATES))
def test_a_call_cut_anywhere_is_read_only_when_complete(file):
    """Every prefix of the rendered calls (a turn cut by the token budget): a call cut anywhere,
    its arguments' start included, is one parse error, never a call with partial arguments."""
    family = TEMPLATES[file][0]
    body = assistant_bodies(file)[0]
    start = body.index(START[family])
    for cut in range(start + len(START[family]), len(body)):
        action = parse_action(body[:cut], family, TOOLS)
        got = ([(c.name, c.arguments) for c in action.tool_calls], len(action.parse_errors))
        assert got == _cut_outcome(family, body[:cut]), (cut, body[:cut], action.parse_errors)


def _unclosed(open_tag: str, close_tag: str) -> str:
    return f"{open_tag} is not closed with {close_tag}; a call runs only when complete"


def _swallowed(key: str, tool: str, tag: str) -> str:
    return f"argument {key!r} of {tool!r} contains {tag}: its closing tag is missing or misspelled"


def _no_arguments(tool: str) -> str:
    return f"arguments of {tool!r} are missing; write a JSON object ({{}} for none)"


LOOKUP = ("lookup_order", {"order_id": "A-1"})
KIMI = ("<|tool_calls_section_begin|>", "<|tool_calls_section_end|>")
KIMI_CALL = "<|tool_call_begin|>functions.lookup_order:0<|tool_call_argument_begin|>"
DS = ("<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>")
DS_CALL = "<｜tool▁call▁begin｜>lookup_order<｜tool▁sep｜>"
DSML = ("<｜DSML｜function_calls>", "</｜DSML｜function_calls>")
DSML_CALL = '<｜DSML｜invoke name="lookup_order">'
XML_CALL = "<tool_call>\n<function=lookup_order>\n<parameter=order_id>\nA-1\n</parameter>\n"
BOOK = "<tool_call>book_trip\n<arg_key>city</arg_key>\n<arg_value>Zürich</arg_value>\n"

# family -> (case, text, calls, errors): the exact outcome of each malformed turn
MALFORMED = {
    "hermes": [
        (
            "cut at the arguments",
            '<tool_call>\n{"name": "lookup_order", "arguments": ',
            [],
            [_unclosed("<tool_call>", "</tool_call>")],
        ),
        (
            "unclosed last block",
            '<tool_call>{"name": "lookup_order", "arguments": {"order_id": "A-1"}}',
            [],
            [_unclosed("<tool_call>", "</tool_call>")],
        ),
        (
            "misspelled close",
            '<tool_call>{"name": "lookup_order", "arguments": {"order_id": "A-1"}}</tool_cal>',
            [],
            [_unclosed("<tool_call>", "</tool_call>")],
        ),
        (
            "a closed call, then a cut one",
            '<tool_call>{"name": "lookup_order", "arguments": '
            '{"order_id": "A-1"}}</tool_call>\n<tool_call>{"name": "track_parcel"',
            [LOOKUP],
            [_unclosed("<tool_call>", "</tool_call>")],
        ),
        (
            "a call in unclosed reasoning",
            '<think>maybe <tool_call>{"name": "lookup_order", '
            '"arguments": {"order_id": "A-1"}}</tool_call>',
            [],
            [],
        ),
    ],
    "qwen3_coder": [
        (
            "cut at the arguments",
            "<tool_call>\n<function=lookup_order>\n",
            [],
            [_unclosed("<tool_call>", "</tool_call>")],
        ),
        (
            "unclosed last block",
            XML_CALL + "</function>\n",
            [],
            [_unclosed("<tool_call>", "</tool_call>")],
        ),
        (
            "misspelled </parameter>",
            "<tool_call>\n<function=track_parcel>\n"
            "<parameter=tracking_no>\nZX99\n</param>\n<parameter=carrier>\ndhl\n</parameter>\n"
            "</function>\n</tool_call>",
            [],
            [_swallowed("tracking_no", "track_parcel", "<parameter=")],
        ),
        (
            "a call in unclosed reasoning",
            "<think>maybe " + XML_CALL + "</function>\n</tool_call>",
            [],
            [],
        ),
    ],
    "glm4_5": [
        (
            "cut at the arguments",
            "<tool_call>lookup_order",
            [],
            [_unclosed("<tool_call>", "</tool_call>")],
        ),
        (
            "unclosed last block",
            BOOK + "<arg_key>date",
            [],
            [_unclosed("<tool_call>", "</tool_call>")],
        ),
        (
            "misspelled </arg_value>",
            "<tool_call>book_trip\n<arg_key>city</arg_key>\n"
            "<arg_value>Zürich</arg_val>\n<arg_key>date</arg_key>\n<arg_value>2026-05-01"
            "</arg_value>\n</tool_call>",
            [],
            [_swallowed("city", "book_trip", "<arg_key>")],
        ),
        ("a call in unclosed reasoning", "<think>maybe " + BOOK + "</tool_call>", [], []),
    ],
    "kimi_k2": [
        ("cut at the arguments", KIMI[0] + KIMI_CALL, [], [_unclosed(*KIMI)]),
        (
            "closed without arguments",
            f"{KIMI[0]}{KIMI_CALL}<|tool_call_end|>{KIMI[1]}",
            [],
            [_no_arguments("lookup_order")],
        ),
        (
            "unclosed section",
            f'{KIMI[0]}{KIMI_CALL}{{"order_id": "A-1"}}<|tool_call_end|>',
            [],
            [_unclosed(*KIMI)],
        ),
    ],
    "deepseek_v3_1": [
        ("cut at the arguments", DS[0] + DS_CALL, [], [_unclosed(*DS)]),
        (
            "closed without arguments",
            f"{DS[0]}{DS_CALL}<｜tool▁call▁end｜>{DS[1]}",
            [],
            [_no_arguments("lookup_order")],
        ),
        (
            "unclosed section",
            f'{DS[0]}{DS_CALL}{{"order_id": "A-1"}}<｜tool▁call▁end｜>',
            [],
            [_unclosed(*DS)],
        ),
    ],
    "deepseek_v3_2": [
        ("cut at the arguments", f"{DSML[0]}\n{DSML_CALL}\n", [], [_unclosed(*DSML)]),
        (
            "unclosed invoke",
            f"{DSML[0]}\n{DSML_CALL}\n{DSML[1]}",
            [],
            [_unclosed("<｜DSML｜invoke", "</｜DSML｜invoke>")],
        ),
        (
            "misspelled </parameter>",
            f'{DSML[0]}\n<｜DSML｜invoke name="track_parcel">\n'
            '<｜DSML｜parameter name="tracking_no" string="true">ZX99</｜DSML｜param>\n'
            '<｜DSML｜parameter name="carrier" string="true">dhl</｜DSML｜parameter>\n'
            f"</｜DSML｜invoke>\n{DSML[1]}",
            [],
            [_swallowed("tracking_no", "track_parcel", "<｜DSML｜parameter")],
        ),
    ],
    "mistral": [
        (
            "cut at the arguments",
            '[TOOL_CALLS][{"name": "lookup_order", "arguments": ',
            [],
            [
                "[TOOL_CALLS] is not followed by valid JSON (Expecting value at char 38): "
                '[{"name": "lookup_order", "arguments":'
            ],
        ),
    ],
    "gpt_oss": [
        (
            "cut at the arguments",
            " to=functions.lookup_order<|channel|>commentary json<|message|>",
            [],
            [_no_arguments("lookup_order")],
        ),
        (
            "closed without arguments",
            " to=functions.lookup_order<|channel|>commentary json<|message|><|call|>",
            [],
            [_no_arguments("lookup_order")],
        ),
    ],
    "llama3_json": [
        (
            "cut at the arguments",
            '{"name": "lookup_order", "parameters": ',
            [],
            [
                'tool call is not valid JSON (Expecting value at char 38): {"name": "lookup_order", '
                '"parameters":'
            ],
        ),
    ],
}


def test_every_family_has_malformed_cases():
    assert set(MALFORMED) == set(FAMILIES)


@pytest.mark.parametrize(
    ("family", "case"), [(f, case[0]) for f in sorted(MALFORMED) for case in MALFORMED[f]]
)
def test_a_malformed_call_has_its_exact_outcome(family, case):
    _, text, calls, errors = next(c for c in MALFORMED[family] if c[0] == case)
    action = parse_action(text, family, TOOLS)
    assert [(c.name, c.arguments) for c in action.tool_calls] == calls
    assert action.parse_errors == errors


@pytest.mark.parametrize("family", ["qwen3_coder", "hermes", "glm4_5", "deepseek_v3_1"])
def test_a_turn_cut_inside_reasoning_the_prompt_opened_has_no_calls(family):
    """Qwen3.5's generation prompt opens <think>: a turn with no </think> is all reasoning."""
    text = {
        "qwen3_coder": "maybe " + XML_CALL + "</function>\n</tool_call>",
        "hermes": 'maybe <tool_call>{"name": "lookup_order", "arguments": {}}</tool_call>',
        "glm4_5": "maybe " + BOOK + "</tool_call>",
        "deepseek_v3_1": f'maybe {DS[0]}{DS_CALL}{{"order_id": "A-1"}}<｜tool▁call▁end｜>{DS[1]}',
    }[family]
    action = parse_action(text, family, TOOLS, reasoning_open=True)
    assert (action.tool_calls, action.parse_errors, action.text) == ([], [], text.strip())
    after = parse_action(
        "R</think>\n" + XML_CALL + "</function>\n</tool_call>",
        "qwen3_coder",
        TOOLS,
        reasoning_open=True,
    )
    assert [(c.name, c.arguments) for c in after.tool_calls] == [LOOKUP]
    assert after.text == "R</think>"
