"""Transcripts: the delta path equals the full template rendering; masks, drift, JSON round trip."""

from __future__ import annotations

import json
import random

import pytest

from mua.families.tool_calls import action_as_message, parse_action
from mua.models import load_tokenizer, render_ids
from mua.rollout.transcript import (
    ChatRenderer,
    TokenRecord,
    Trajectory,
    TranscriptBuilder,
    check_drift,
    per_turn_samples,
    template_messages,
)

ALPHABET = "abcdefghijklmnopqrstuvwxyz ABCXYZ0123456789.,;:!?-_()[]{}'\"\n\t/éü中文"
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "lookup",
            "description": "Find a thing.",
            "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
        },
    },
    {
        "type": "function",
        "function": {
            "name": "add",
            "description": "Add.",
            "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}},
        },
    },
]

BROKEN_MARKUP = [
    "</tool_call>",
    "<tool_call>not json</tool_call>",
    "<tool_call></tool_call>",
    '<tool_call>{"name": "lookup", "arguments": {"q": ',
]


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer("tiny:qwen3-1m")


def random_text(rng: random.Random, min_len: int = 1, max_len: int = 40) -> str:
    body = "".join(rng.choice(ALPHABET) for _ in range(rng.randint(min_len, max_len)))
    # Assistant text is stored stripped by the parser, so keep its ends visible.
    return rng.choice("abcXYZ") + body.strip() + rng.choice("xyz.!")


def random_assistant(rng: random.Random, max_calls: int = 3, text_with_calls: bool = True) -> dict:
    kind = rng.random()
    if kind < 0.35:
        return {"role": "assistant", "content": random_text(rng)}
    if kind < 0.42:  # markup that is no valid call (stray, malformed, empty) stays verbatim
        broken = rng.choice(BROKEN_MARKUP)
        return {"role": "assistant", "content": random_text(rng) + broken + random_text(rng)}
    if kind < 0.55:
        return {
            "role": "assistant",
            "content": f"[{rng.choice(['action', 'search', 'answer'])}] {random_text(rng)}",
        }
    calls = []
    for _ in range(rng.randint(1, max_calls)):
        name = rng.choice(["lookup", "add"])
        args = {"q": random_text(rng)} if name == "lookup" else {"a": rng.randint(-999, 999)}
        calls.append({"type": "function", "function": {"name": name, "arguments": args}})
    content = random_text(rng) if text_with_calls and rng.random() < 0.5 else ""
    return {"role": "assistant", "content": content, "tool_calls": calls}


def random_conversation(
    rng: random.Random, max_calls: int = 3, text_with_calls: bool = True, env_role: bool = True
) -> list[dict]:
    msgs = []
    if rng.random() < 0.8:
        msgs.append({"role": "system", "content": random_text(rng)})
    msgs.append({"role": "user", "content": random_text(rng)})
    for _ in range(rng.randint(1, 5)):
        asst = random_assistant(rng, max_calls, text_with_calls)
        msgs.append(asst)
        for call in asst.get("tool_calls", []):
            msgs.append(
                {"role": "tool", "name": call["function"]["name"], "content": random_text(rng)}
            )
        if "tool_calls" not in asst or rng.random() < 0.3:
            role = rng.choice(["user", "user", "env"] if env_role else ["user"])
            msgs.append({"role": role, "content": random_text(rng)})
    if rng.random() < 0.4 and msgs[-1]["role"] != "assistant":
        msgs.append(random_assistant(rng, max_calls, text_with_calls))
    return msgs


def add_call_and_result() -> list[dict]:
    """An assistant turn calling `add(a=1)` (no text) and the tool's reply "2"."""
    call = {"type": "function", "function": {"name": "add", "arguments": {"a": 1}}}
    return [
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "name": "add", "content": "2"},
    ]


def build_by_delta_path(tokenizer, msgs: list[dict], tools, parser: str = "auto"):
    """What the runner does: prompt, sampled turns verbatim (parsed back to messages), reply deltas."""
    renderer = ChatRenderer(tokenizer, tools)
    builder = TranscriptBuilder(renderer)
    first = next(i for i, m in enumerate(msgs) if m["role"] == "assistant")
    builder.add_prompt(msgs[:first])
    i, turn, rebuilt = first, 0, list(msgs[:first])
    while i < len(msgs):
        sampled = renderer.encode(renderer.assistant_text(msgs[i]))
        text = tokenizer.decode(sampled)
        assert text.endswith(renderer.stop_text)
        action = parse_action(text[: -len(renderer.stop_text)], parser)
        rebuilt.append(action_as_message(action))
        builder.add_sampled(sampled, [-0.5] * len(sampled), turn)
        j = i + 1
        while j < len(msgs) and msgs[j]["role"] != "assistant":
            j += 1
        if j > i + 1:
            builder.add_followup(msgs[i + 1 : j])
            rebuilt.extend(msgs[i + 1 : j])
        i, turn = j, turn + 1
    return builder, rebuilt


def _normalise(msg: dict) -> dict:
    out = {"role": msg["role"], "content": msg.get("content") or ""}
    if msg.get("tool_calls"):
        out["tool_calls"] = [
            (c["function"]["name"], c["function"]["arguments"]) for c in msg["tool_calls"]
        ]
    return out


def test_delta_path_equals_full_template_on_1000_random_conversations(tokenizer):
    rng = random.Random(1234)
    stop_id = tokenizer.convert_tokens_to_ids("<|im_end|>")
    for case in range(1000):
        msgs = random_conversation(rng)
        tools = TOOLS if rng.random() < 0.5 else []
        builder, rebuilt = build_by_delta_path(tokenizer, msgs, tools)
        # The parser gives back the messages the turns were rendered from.
        assert [_normalise(m) for m in rebuilt] == [_normalise(m) for m in msgs], case
        ends_with_prompt = msgs[-1]["role"] != "assistant"
        full = render_ids(
            tokenizer,
            template_messages(msgs),
            tools or None,
            add_generation_prompt=ends_with_prompt,
        )
        stream = builder.token_ids
        if not ends_with_prompt:
            assert full[len(stream) :] == tokenizer.encode("\n", add_special_tokens=False), case
            full = full[: len(stream)]
        assert stream == full, (
            f"conversation {case}: {check_drift(builder, msgs, ends_with_prompt)}"
        )
        assert check_drift(builder, msgs, ends_with_prompt) is None
        # Every assistant turn ends with its stop token, trained on.
        for start in builder.turn_starts:
            end = start
            while end < len(stream) and builder.turn_index[end] == builder.turn_index[start]:
                end += 1
            assert stream[end - 1] == stop_id and builder.loss_mask[end - 1] == 1, case
        assert all(
            m == (s == "assistant")
            for m, s in zip(builder.loss_mask, builder.sources, strict=False)
        )
        assert all(
            (t >= 0) == (s == "assistant")
            for t, s in zip(builder.turn_index, builder.sources, strict=False)
        )


def test_sources_label_each_reply(tokenizer):
    msgs = [
        {"role": "user", "content": "hello"},
        *add_call_and_result(),
        {"role": "env", "content": "Answer now."},
    ]
    builder, _ = build_by_delta_path(tokenizer, msgs, TOOLS)
    text_by_source = {}
    for tok, src in zip(builder.token_ids, builder.sources, strict=False):
        text_by_source.setdefault(src, []).append(tok)
    assert "2" in tokenizer.decode(text_by_source["tool"])
    assert "Answer now." in tokenizer.decode(text_by_source["env"])
    assert tokenizer.decode(text_by_source["prompt"]).endswith("<|im_start|>assistant\n")


TWO_TURNS = [
    {"role": "user", "content": "hi"},
    {"role": "assistant", "content": "hello there"},
    {"role": "user", "content": "again"},
    {"role": "assistant", "content": "ok"},
]


def _replace_turn(builder, turn: int, new_ids: list[int]) -> None:
    start = builder.turn_starts[turn]
    end = start
    while end < len(builder.token_ids) and builder.turn_index[end] == turn:
        end += 1
    for lst, fill in (
        (builder.token_ids, None),
        (builder.sources, "assistant"),
        (builder.loss_mask, 1),
        (builder.logprobs, -0.1),
        (builder.turn_index, turn),
    ):
        lst[start:end] = list(new_ids) if fill is None else [fill] * len(new_ids)
    shift = len(new_ids) - (end - start)
    builder.turn_starts[turn + 1 :] = [s + shift for s in builder.turn_starts[turn + 1 :]]


def test_same_text_other_tokens_is_not_drift(tokenizer):
    msgs = [dict(m) for m in TWO_TURNS]
    builder, _ = build_by_delta_path(tokenizer, msgs, [])
    assert (
        check_drift(builder, msgs, ends_with_prompt=False) is None
        and builder.retokenized_turns == 0
    )
    # The model spelled "hello" letter by letter: same text, other ids than the tokenizer's.
    spelled = [tokenizer.convert_tokens_to_ids(ch) for ch in "hello"]
    canonical = builder.renderer.encode(builder.renderer.assistant_text(msgs[1]))
    assert tokenizer.encode("hello", add_special_tokens=False) != spelled
    _replace_turn(
        builder, 0, spelled + canonical[len(tokenizer.encode("hello", add_special_tokens=False)) :]
    )
    assert tokenizer.decode(builder.token_ids).count("hello there<|im_end|>") == 1
    assert check_drift(builder, msgs, ends_with_prompt=False) is None
    assert builder.retokenized_turns == 1


def test_drift_is_detected_and_handled_per_turn(tokenizer):
    msgs = [dict(m) for m in TWO_TURNS]
    builder, _ = build_by_delta_path(tokenizer, msgs, [])
    # The model wrote a leading space the stored (stripped) message no longer has: real drift.
    sampled = builder.renderer.encode(" hello there<|im_end|>")
    _replace_turn(builder, 0, sampled)
    diff = check_drift(builder, msgs, ends_with_prompt=False)
    assert diff is not None and "token" in diff and "re-rendered" in diff
    samples = per_turn_samples(builder, msgs)
    assert [s["turn"] for s in samples] == [0, 1]
    for sample, upto in zip(samples, (1, 3), strict=False):
        context = render_ids(tokenizer, msgs[:upto], add_generation_prompt=True)
        assert sample["token_ids"][: len(context)] == context
        assert sum(sample["loss_mask"]) == len(sample["token_ids"]) - len(context)
    trained = samples[0]["token_ids"][-sum(samples[0]["loss_mask"]) :]
    assert trained == sampled  # the policy's own tokens, verbatim


def test_raw_interventions_glue_into_the_assistant_message():
    msgs = [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "Let me"},
        {"role": "env", "content": " Wait, answer.", "style": "raw"},
        {"role": "assistant", "content": " 42"},
        {"role": "env", "content": "chat style"},
    ]
    out = template_messages(msgs)
    assert out == [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "Let me Wait, answer. 42"},
        {"role": "user", "content": "chat style"},
    ]


def test_trajectory_json_round_trip():
    traj = Trajectory(
        task_id="t",
        group_id="0:t",
        sample_index=1,
        record=TokenRecord(
            token_ids=[1, 2],
            sources=["prompt", "assistant"],
            loss_mask=[0, 1],
            logprobs=[0.0, -0.3],
            turn_index=[-1, 0],
        ),
        turn_rewards=[1.0],
        reward=1.0,
        reward_components={"correct": 1.0},
        termination="done",
        messages=[{"role": "user", "content": "é"}],
        num_turns=1,
        metrics={"drift": 0.0},
    )
    text = traj.to_json()
    assert json.loads(text)["termination"] == "done"
    assert Trajectory.from_json(text) == traj


def test_a_conversation_renders_once_per_tokenizer_and_its_ids_stay_its_own(tokenizer, monkeypatch):
    """`rendered_ids` remembers whole renderings: the same conversation (with the same tools and
    generation prompt) renders once across renderers of one tokenizer; anything else differing
    renders again; a caller editing the ids it got changes nobody else's."""
    renders = []
    real_render = ChatRenderer.render

    def counting(self, messages, add_generation_prompt=False):
        renders.append(json.dumps(messages))
        return real_render(self, messages, add_generation_prompt)

    first, with_tools = ChatRenderer(tokenizer), ChatRenderer(tokenizer, TOOLS)  # probes render
    monkeypatch.setattr(ChatRenderer, "render", counting)
    msgs = [{"role": "user", "content": "render me once " + random_text(random.Random(5))}]
    ids = first.prompt_ids(msgs)
    assert ids == first.encode(real_render(first, msgs, add_generation_prompt=True))
    ids.append(-1)
    assert ChatRenderer(tokenizer).prompt_ids([dict(m) for m in msgs]) == ids[:-1]
    assert len(renders) == 1
    first.rendered_ids(msgs, add_generation_prompt=False)
    with_tools.prompt_ids(msgs)
    first.prompt_ids(
        msgs + [{"role": "assistant", "content": "x"}, {"role": "user", "content": "y"}]
    )
    assert len(renders) == 4
