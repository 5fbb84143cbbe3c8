"""GLM-4.5/4.6's template has no end-of-turn token: a turn ends when the model writes the next
role token (`<|user|>`, `<|observation|>`). The renderer makes those tokens stops, the token the
model sampled starts the next turn's text (never written twice), a stop the template would not
write there is replaced by the template's own role token, and the token stream stays the
template's render of the conversation."""

from __future__ import annotations

import pytest

from mua.errors import RunFailure
from mua.rollout.transcript import ChatRenderer, TranscriptBuilder, check_drift
from tests.unit.family_templates import TOOLS, family_tokenizer

USER = {"role": "user", "content": "Where is my order A-1042?"}
CALL = {
    "role": "assistant",
    "content": "",
    "tool_calls": [
        {
            "id": "c0",
            "type": "function",
            "function": {"name": "lookup_order", "arguments": {"order_id": "A-1042"}},
        }
    ],
}
RESULT = {
    "role": "tool",
    "tool_call_id": "c0",
    "name": "lookup_order",
    "content": '{"status": "shipped"}',
}
ANSWER = {"role": "assistant", "content": "It has shipped."}
THANKS = {"role": "user", "content": "Thanks!"}


def _renderer():
    return ChatRenderer(family_tokenizer("glm4_6.jinja"), TOOLS)


def _sample(builder, message: dict, stop: str, turn: int) -> None:
    ids = builder.renderer.encode(builder.renderer.assistant_text(message) + stop)
    builder.add_sampled(ids, [0.0] * len(ids), turn)


def _render_ids(renderer, messages, gen=True) -> list[int]:
    return renderer.encode(renderer.render(messages, add_generation_prompt=gen))


def test_role_tokens_are_stops_and_are_stripped_from_the_turn_text():
    renderer = _renderer()
    tok = renderer.tokenizer
    assert renderer.stop_text == ""
    assert renderer.role_stops == ("<|user|>", "<|observation|>")
    stops = set(renderer.stop_token_ids())
    for text in ("<|user|>", "<|observation|>", "<|endoftext|>"):
        assert tok.convert_tokens_to_ids(text) in stops
    assert tok.convert_tokens_to_ids("<|assistant|>") not in stops
    assert renderer.strip_stop("done<|observation|>") == "done"
    assert renderer.strip_stop("done<|user|>") == "done"
    assert renderer.strip_stop("done") == "done"
    # the turn's own text carries no stop; what follows it starts with the next role token
    assert not renderer.assistant_text(CALL).endswith(("<|user|>", "<|observation|>"))
    assert renderer.followup_text([RESULT]).startswith("<|observation|>")
    assert renderer.followup_text([THANKS]).startswith("<|user|>")
    assert renderer.followup_text([], add_generation_prompt=False) == ""


def test_the_sampled_role_token_starts_the_next_turn_once():
    renderer = _renderer()
    builder = TranscriptBuilder(renderer)
    builder.add_prompt([USER])
    _sample(builder, CALL, "<|observation|>", 0)
    builder.add_followup([RESULT])
    _sample(builder, ANSWER, "<|user|>", 1)
    builder.add_followup([THANKS])
    messages = [USER, CALL, RESULT, ANSWER, THANKS]
    assert builder.token_ids == _render_ids(renderer, messages)
    observation = renderer.tokenizer.convert_tokens_to_ids("<|observation|>")
    at = builder.token_ids.index(observation)
    assert (builder.loss_mask[at], builder.sources[at]) == (1, "assistant")  # sampled, trained
    assert builder.token_ids.count(observation) == 1
    assert check_drift(builder, messages, ends_with_prompt=True) is None


def test_a_stop_the_template_would_not_write_there_is_replaced():
    renderer = _renderer()
    tok = renderer.tokenizer
    builder = TranscriptBuilder(renderer)
    builder.add_prompt([USER])
    _sample(builder, CALL, "<|user|>", 0)  # a call ended with <|user|>, then a tool result
    builder.add_followup([RESULT])
    _sample(builder, ANSWER, "<|endoftext|>", 1)  # eos, then the user speaks again
    builder.add_followup([THANKS])
    messages = [USER, CALL, RESULT, ANSWER, THANKS]
    assert builder.token_ids == _render_ids(renderer, messages)
    assert tok.convert_tokens_to_ids("<|endoftext|>") not in builder.token_ids
    assert len(builder.turn_starts) == 2
    assert check_drift(builder, messages, ends_with_prompt=True) is None


def test_a_last_turn_ended_by_its_role_token_is_not_drift():
    renderer = _renderer()
    builder = TranscriptBuilder(renderer)
    builder.add_prompt([USER])
    _sample(builder, ANSWER, "<|user|>", 0)
    assert builder.ended_with_stop()
    assert check_drift(builder, [USER, ANSWER], ends_with_prompt=False) is None
    assert builder.token_ids[:-1] == _render_ids(renderer, [USER, ANSWER], gen=False)


def test_a_template_with_no_turn_end_and_no_known_family_is_refused_in_one_line():
    tok = family_tokenizer("glm4_6.jinja")
    tok.chat_template = (
        "{% for m in messages %}<|{{ m.role }}|>\n{{ m.content }}{% endfor %}"
        "{% if add_generation_prompt %}<|assistant|>{% endif %}"
    )
    with pytest.raises(
        RunFailure, match="cannot find how the chat template ends an assistant turn"
    ):
        ChatRenderer(tok)
