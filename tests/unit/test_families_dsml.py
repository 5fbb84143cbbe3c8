"""DeepSeek-V3.2's DSML tool calls, read from strings written by hand in the format of
DeepSeek's published V3.2 encoding script (no chat template of V3.2 exists to render them),
and Qwen3.6 read as Qwen3.5's XML."""

from __future__ import annotations

import pytest

from mua.families import detect_family, get_family
from mua.families.tool_calls import parse_action
from tests.unit.family_templates import TOOLS

B, E = "<｜DSML｜function_calls>", "</｜DSML｜function_calls>"


def invoke(name: str, *params: tuple[str, str, str]) -> str:
    inner = "\n".join(
        f'<｜DSML｜parameter name="{k}" string="{s}">{v}</｜DSML｜parameter>' for k, s, v in params
    )
    return f'<｜DSML｜invoke name="{name}">\n{inner}\n</｜DSML｜invoke>'


TWO_CALLS = (
    "I will look both up."
    + f"\n\n{B}\n"
    + invoke("lookup_order", ("order_id", "true", "A-1042"))
    + "\n"
    + invoke(
        "track_parcel",
        ("tracking_no", "true", "0042"),
        ("attempts", "false", "2"),
        ("express", "false", "true"),
        ("legs", "false", '["a", "b"]'),
        ("note", "true", 'line one\n"quoted" <b>'),
    )
    + f"\n{E}<｜end▁of▁sentence｜>"
)


def test_two_calls_in_one_block_typed_by_their_string_attribute():
    action = parse_action(TWO_CALLS.removesuffix("<｜end▁of▁sentence｜>"), "deepseek_v3_2", TOOLS)
    assert action.parse_errors == []
    assert [(c.name, c.arguments) for c in action.tool_calls] == [
        ("lookup_order", {"order_id": "A-1042"}),
        (
            "track_parcel",
            {
                "tracking_no": "0042",  # string="true": kept as written, not read as a number
                "attempts": 2,
                "express": True,
                "legs": ["a", "b"],
                "note": 'line one\n"quoted" <b>',
            },
        ),
    ]
    assert action.text == "I will look both up."


def test_whitespace_between_tags_is_free_and_no_arguments_is_a_call():
    text = f'  {B}  <｜DSML｜invoke  name="lookup_order" >  </｜DSML｜invoke>\n\n{E}  '
    action = parse_action(text, "deepseek_v3_2", TOOLS)
    assert action.parse_errors == []
    assert [(c.name, c.arguments) for c in action.tool_calls] == [("lookup_order", {})]


def test_calls_inside_reasoning_are_not_read():
    call = f"{B}\n{invoke('lookup_order', ('order_id', 'true', 'A-1'))}\n{E}"
    action = parse_action(f"<think>maybe {call}</think>Done.", "deepseek_v3_2", TOOLS)
    assert action.tool_calls == [] and action.parse_errors == []
    assert action.text.endswith("Done.")


@pytest.mark.parametrize(
    ("text", "error"),
    [
        (f"{B}\n{invoke('f', ('a', 'false', 'not json'))}\n{E}", 'string="false" but is not JSON'),
        (f"{B}\n{invoke('f', ('a', 'true', '1'), ('a', 'true', '2'))}\n{E}", "given twice"),
        (f"{B}\n<｜DSML｜invoke>\n</｜DSML｜invoke>\n{E}", 'without name="NAME"'),
        (f"{B}\n{E}", "without a call"),
        (
            f'{B}\n<｜DSML｜invoke name="f">\n<｜DSML｜parameter name="a">1'
            f"</｜DSML｜parameter>\n</｜DSML｜invoke>\n{E}",
            "unreadable arguments",
        ),
    ],
)
def test_a_malformed_call_is_one_parse_error_worded_for_the_model(text, error):
    action = parse_action(text, "deepseek_v3_2", TOOLS)
    assert action.tool_calls == []
    assert len(action.parse_errors) == 1 and error in action.parse_errors[0]


def test_text_between_calls_is_reported():
    action = parse_action(f"{B}\nchatter{invoke('f')}\n{E}", "deepseek_v3_2", TOOLS)
    assert action.parse_errors == ["unexpected text between tool calls: chatter"]


def test_a_block_cut_anywhere_is_one_parse_error_and_no_call():
    body = TWO_CALLS.removesuffix("<｜end▁of▁sentence｜>")
    start = body.index(B)
    unclosed = f"{B} is not closed with {E}; a call runs only when complete"
    for cut in range(start + len(B), len(body)):
        action = parse_action(body[:cut], "deepseek_v3_2", TOOLS)
        assert (action.tool_calls, action.parse_errors) == ([], [unclosed]), body[:cut]


def test_dsml_and_v3_1_readers_do_not_read_each_other():
    v31 = (
        "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>lookup_order<｜tool▁sep｜>"
        '{"order_id": "A-1"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>'
    )
    assert parse_action(TWO_CALLS, "deepseek_v3_1", TOOLS).tool_calls == []
    assert parse_action(v31, "deepseek_v3_2", TOOLS).tool_calls == []


def test_auto_picks_dsml_from_a_template_that_writes_it_and_aliases_resolve():
    template = "{% for m in messages %}{{ m.content }}{% endfor %}<｜DSML｜function_calls>"
    assert detect_family(template).name == "deepseek_v3_2"
    action = parse_action(TWO_CALLS, "auto", TOOLS, template)
    assert [c.name for c in action.tool_calls] == ["lookup_order", "track_parcel"]
    assert get_family("dsml").name == get_family("deepseek_v32").name == "deepseek_v3_2"


def test_qwen3_6_reads_qwen3_5_xml():
    text = (
        "<tool_call>\n<function=track_parcel>\n<parameter=tracking_no>\nZX99\n</parameter>\n"
        "<parameter=attempts>\n2\n</parameter>\n</function>\n</tool_call>"
    )
    assert get_family("qwen3_6").name == "qwen3_coder"
    action = parse_action(text, "qwen3_6", TOOLS)
    assert [(c.name, c.arguments) for c in action.tool_calls] == [
        ("track_parcel", {"tracking_no": "ZX99", "attempts": 2})
    ]
