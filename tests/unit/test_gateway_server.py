"""The training gateway over a scripted engine, called with the `openai` SDK: plain and streamed
answers, tool calls, malformed calls, `stop` strings, refused parameters, the prefix rule
(continued vs trimmed histories) and session isolation. The engine logs every prompt it was
given, so the tests check the record against what was really sampled from."""

from __future__ import annotations

import asyncio
import json

import openai
import pytest

from mua.gateway.server import Gateway
from mua.gateway.session import SessionLimits
from mua.models import load_tokenizer
from tests.fakes.scripted_engine import ScriptedEngine

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "guess",
            "description": "Guess the number.",
            "parameters": {"type": "object", "properties": {"n": {"type": "integer"}}},
        },
    }
]


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer("tiny:qwen2-1m")


def run(coro):
    return asyncio.run(coro)


async def _with_gateway(tokenizer, replies, body, *, tool_parser="hermes", limits=None):
    engine = ScriptedEngine(tokenizer, replies)
    gateway = await Gateway(tokenizer, engine=engine, tool_parser=tool_parser).start()
    try:
        session = gateway.open_session(limits=limits)
        client = openai.AsyncOpenAI(base_url=gateway.base_url(), api_key=session.key, max_retries=0)
        out = await body(client, gateway, session)
        await client.close()
        return engine, session, out
    finally:
        await gateway.close()


def _sampled_positions(session):
    rec = session.record()
    return [i for i, m in enumerate(rec.loss_mask) if m]


def test_a_continued_conversation_is_one_sample_fed_exactly_its_record(tokenizer):
    async def body(client, gateway, session):
        msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
        first = await client.chat.completions.create(model="m", messages=msgs)
        msgs.append(first.choices[0].message.model_dump(exclude_none=True))
        msgs.append({"role": "user", "content": "And again?"})
        second = await client.chat.completions.create(model="m", messages=msgs)
        return first, second

    engine, session, (first, second) = run(_with_gateway(tokenizer, ["hello", "again"], body))
    assert first.choices[0].message.content == "hello"
    assert second.choices[0].message.content == "again"
    assert first.choices[0].finish_reason == "stop"
    assert len(session.segments) == 1 and session.splits == 0
    rec = session.record()
    # the second prompt is the first prompt, the first turn's sampled ids, then the delta
    assert engine.prompts[1][: len(engine.prompts[0])] == engine.prompts[0]
    start = len(engine.prompts[0])
    assert engine.prompts[1][start : start + len(engine.sampled[0])] == engine.sampled[0]
    assert rec.token_ids == engine.prompts[1] + engine.sampled[1]
    # only sampled ids are trained, with the engine's log-probs
    sampled = [t for s in engine.sampled for t in s]
    assert [rec.token_ids[i] for i in _sampled_positions(session)] == sampled
    assert all(rec.logprobs[i] == -0.25 for i in _sampled_positions(session))
    assert sum(rec.loss_mask) == len(sampled) == session.sampled_tokens
    assert set(rec.turn_index[i] for i in _sampled_positions(session)) == {0, 1}


def test_a_trimmed_history_splits_into_a_new_sample(tokenizer):
    async def body(client, gateway, session):
        msgs = [{"role": "user", "content": "Hi"}]
        first = await client.chat.completions.create(model="m", messages=msgs)
        msgs += [first.choices[0].message.model_dump(exclude_none=True)]
        msgs += [{"role": "user", "content": "more"}]
        await client.chat.completions.create(model="m", messages=msgs)
        # the program keeps only the last user message
        await client.chat.completions.create(model="m", messages=[msgs[-1]])

    engine, session, _ = run(_with_gateway(tokenizer, ["a", "b", "c"], body))
    assert session.splits == 1 and len(session.segments) == 2
    rec = session.record()
    first_len, second_len = session.segment_lengths()
    assert rec.token_ids[first_len:] == engine.prompts[2] + engine.sampled[2]
    # the new sample's prompt is masked out; its sampled ids are trained
    second_mask = rec.loss_mask[first_len:]
    assert sum(second_mask) == len(engine.sampled[2])
    assert second_mask[: len(engine.prompts[2])] == [0] * len(engine.prompts[2])
    assert session.metrics()["gateway/splits"] == 1.0


def test_tool_calls_come_back_as_openai_tool_calls_and_continue_the_sample(tokenizer):
    call = '<tool_call>\n{"name": "guess", "arguments": {"n": 3}}\n</tool_call>'

    async def body(client, gateway, session):
        msgs = [{"role": "user", "content": "Guess"}]
        first = await client.chat.completions.create(model="m", messages=msgs, tools=TOOLS)
        message = first.choices[0].message
        msgs.append(message.model_dump(exclude_none=True))
        msgs.append({"role": "tool", "tool_call_id": message.tool_calls[0].id, "content": "higher"})
        second = await client.chat.completions.create(model="m", messages=msgs, tools=TOOLS)
        return first, second

    engine, session, (first, second) = run(_with_gateway(tokenizer, [call, "done"], body))
    calls = first.choices[0].message.tool_calls
    assert first.choices[0].finish_reason == "tool_calls"
    assert len(calls) == 1 and calls[0].function.name == "guess"
    assert json.loads(calls[0].function.arguments) == {"n": 3}
    assert second.choices[0].message.content == "done"
    assert session.splits == 0 and session.malformed == 0
    # the second prompt continues the sampled call verbatim, then the tool's answer
    assert engine.prompts[1][: len(engine.prompts[0]) + len(engine.sampled[0])] == (
        engine.prompts[0] + engine.sampled[0]
    )
    assert "higher" in tokenizer.decode(engine.prompts[1][len(engine.prompts[0]) :])


def test_a_malformed_call_is_plain_text_and_counted(tokenizer):
    broken = '<tool_call>\n{"name": "guess", "arguments": {"n": 3\n</tool_call>'
    unknown = '<tool_call>\n{"name": "shell", "arguments": {}}\n</tool_call>'

    async def body(client, gateway, session):
        msgs = [{"role": "user", "content": "Guess"}]
        a = await client.chat.completions.create(model="m", messages=msgs, tools=TOOLS)
        b = await client.chat.completions.create(model="m", messages=msgs, tools=TOOLS)
        return a, b

    _, session, (a, b) = run(_with_gateway(tokenizer, [broken, unknown], body))
    for reply, text in ((a, broken), (b, unknown)):
        assert reply.choices[0].message.tool_calls is None
        assert reply.choices[0].message.content == text
        assert reply.choices[0].finish_reason == "stop"
    assert session.malformed == 2


def test_a_reply_cut_by_max_tokens_returns_no_calls(tokenizer):
    call = '<tool_call>\n{"name": "guess", "arguments": {"n": 3}}\n</tool_call>'
    cut_reply = call + " and a few more words after the call" * 4
    call_tokens = len(tokenizer.encode(call, add_special_tokens=False))

    async def body(client, gateway, session):
        msgs = [{"role": "user", "content": "Guess"}]
        return await client.chat.completions.create(
            model="m", messages=msgs, tools=TOOLS, max_tokens=call_tokens + 6
        )

    engine, session, reply = run(_with_gateway(tokenizer, [cut_reply], body))
    assert len(engine.sampled[0]) == call_tokens + 6
    assert reply.choices[0].finish_reason == "length"
    assert reply.choices[0].message.tool_calls is None
    assert reply.choices[0].message.content == tokenizer.decode(engine.sampled[0])
    assert session.malformed == 1


def test_streaming_sends_the_same_answer_as_events(tokenizer):
    call = 'ok <tool_call>\n{"name": "guess", "arguments": {"n": 5}}\n</tool_call>'

    async def body(client, gateway, session):
        msgs = [{"role": "user", "content": "Guess"}]
        stream = await client.chat.completions.create(
            model="m", messages=msgs, tools=TOOLS, stream=True,
            stream_options={"include_usage": True},
        )  # fmt: skip
        return [chunk async for chunk in stream]

    engine, session, chunks = run(_with_gateway(tokenizer, [call], body))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    calls = [tc for c in chunks if c.choices for tc in (c.choices[0].delta.tool_calls or [])]
    finish = [
        c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason
    ]
    assert text == "ok"
    assert [tc.function.name for tc in calls] == ["guess"]
    assert json.loads(calls[0].function.arguments) == {"n": 5}
    assert finish == ["tool_calls"]
    assert chunks[-1].usage.completion_tokens == len(engine.sampled[0])
    assert session.turns == 1


def test_a_stop_string_cuts_the_answer_and_the_record(tokenizer):
    async def body(client, gateway, session):
        msgs = [{"role": "user", "content": "Count"}]
        return await client.chat.completions.create(model="m", messages=msgs, stop=["three"])

    engine, session, reply = run(_with_gateway(tokenizer, ["one two three four five"], body))
    assert reply.choices[0].message.content == "one two "
    kept = [session.record().token_ids[i] for i in _sampled_positions(session)]
    assert kept == engine.sampled[0][: len(kept)] and len(kept) < len(engine.sampled[0])
    assert "three" in tokenizer.decode(kept) and "four" not in tokenizer.decode(kept)
    assert session.dropped_tokens == len(engine.sampled[0]) - len(kept)


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        ({"n": 2}, "n=2"),
        ({"tool_choice": "required"}, "tool_choice"),
        ({"logprobs": True}, "logprobs"),
        ({"temperature": 7}, "temperature"),
    ],
)
def test_what_the_gateway_cannot_honour_is_a_clear_400(tokenizer, extra, named):
    async def body(client, gateway, session):
        with pytest.raises(openai.BadRequestError) as err:
            await client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "x"}], **extra
            )
        return err.value

    engine, session, err = run(_with_gateway(tokenizer, ["unused"], body))
    assert err.status_code == 400 and named in str(err)
    assert engine.prompts == [] and session.turns == 0


def test_the_turn_budget_refuses_further_requests(tokenizer):
    async def body(client, gateway, session):
        msgs = [{"role": "user", "content": "x"}]
        await client.chat.completions.create(model="m", messages=msgs)
        with pytest.raises(openai.BadRequestError) as err:
            await client.chat.completions.create(model="m", messages=msgs)
        return err.value

    _, session, err = run(_with_gateway(tokenizer, ["a", "b"], body, limits=SessionLimits(1)))
    assert "1 turns" in str(err) and session.budget_hit == "max_turns" and session.turns == 1


def test_sessions_are_isolated_and_unknown_keys_refused(tokenizer):
    async def body(client, gateway, session):
        other = gateway.open_session()
        by_path = openai.AsyncOpenAI(
            base_url=gateway.base_url(other.key), api_key="anything", max_retries=0
        )
        msgs_a = [{"role": "user", "content": "I am A"}]
        msgs_b = [{"role": "user", "content": "I am B, longer"}]
        await asyncio.gather(
            client.chat.completions.create(model="m", messages=msgs_a),
            by_path.chat.completions.create(model="m", messages=msgs_b),
        )
        stranger = openai.AsyncOpenAI(
            base_url=gateway.base_url(), api_key="not-a-session", max_retries=0
        )
        with pytest.raises(openai.AuthenticationError):
            await stranger.chat.completions.create(model="m", messages=msgs_a)
        with pytest.raises(openai.AuthenticationError):
            await stranger.models.list()
        models = await client.models.list()
        info_a = await client.get("/session", cast_to=object)
        info_b = await by_path.get("/session", cast_to=object)
        for c in (by_path, stranger):
            await c.close()
        return other, models, info_a, info_b

    _, session, (other, models, info_a, info_b) = run(_with_gateway(tokenizer, ["a", "b"], body))
    assert [m.id for m in models.data] == ["mua-policy"]
    assert info_a["turns"] == 1 and info_b["turns"] == 1
    text_a = tokenizer.decode(session.record().token_ids)
    text_b = tokenizer.decode(other.record().token_ids)
    assert "I am A" in text_a and "I am B" not in text_a
    assert "I am B" in text_b and "I am A" not in text_b


def test_a_session_without_an_env_has_no_env_routes(tokenizer):
    async def body(client, gateway, session):
        with pytest.raises(openai.NotFoundError) as err:
            await client.post("/env/reset", cast_to=object)
        return err.value

    _, _, err = run(_with_gateway(tokenizer, [], body))
    assert "no env" in str(err)
