"""The gateway's Responses and Messages APIs, structured output and tool choice, and its JSON
errors for unknown routes, over a scripted engine: the Responses API with the `openai` SDK
(plain, streamed, `previous_response_id`), the Messages API with raw HTTP (`x-api-key`, tool_use
and tool_result, `stop_sequences`, streamed), checked replies counted, never refused."""

from __future__ import annotations

import asyncio
import json

import aiohttp
import openai
import pytest

from mua.gateway.server import Gateway
from mua.gateway.structured import follows
from mua.models import load_tokenizer
from tests.fakes.scripted_engine import ScriptedEngine

GUESS = '<tool_call>\n{"name": "guess", "arguments": {"number": 3}}\n</tool_call>'
CHAT_TOOL = {
    "type": "function",
    "function": {
        "name": "guess",
        "description": "Guess the number.",
        "parameters": {"type": "object", "properties": {"number": {"type": "integer"}}},
    },
}
RESPONSES_TOOL = {
    "type": "function",
    "name": "guess",
    **{k: v for k, v in CHAT_TOOL["function"].items() if k != "name"},
}
MESSAGES_TOOL = {
    "name": "guess",
    "description": "Guess the number.",
    "input_schema": CHAT_TOOL["function"]["parameters"],
}
SCHEMA = {
    "type": "object",
    "properties": {"number": {"type": "integer"}},
    "required": ["number"],
    "additionalProperties": False,
}


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer("tiny:qwen2-1m")


async def _serve(tokenizer, replies, body):
    engine = ScriptedEngine(tokenizer, list(replies))
    gateway = await Gateway(tokenizer, engine=engine, tool_parser="hermes").start()
    try:
        session = gateway.open_session()
        out = await body(gateway, session)
        return engine, session, out
    finally:
        await gateway.close()


def serve(tokenizer, replies, body):
    return asyncio.run(_serve(tokenizer, replies, body))


def _trained(session) -> list[int]:
    rec = session.record()
    return [t for t, m in zip(rec.token_ids, rec.loss_mask, strict=True) if m]


async def _post(gateway, path: str, body, headers: dict[str, str], method: str = "POST"):
    url = f"http://{gateway.host}:{gateway.port}{path}"
    async with aiohttp.ClientSession() as http:
        async with http.request(method, url, json=body, headers=headers) as resp:
            text = await resp.text()
            return resp.status, resp.content_type, text


# Responses API -------------------------------------------------------------------------------


def test_a_responses_tool_call_and_its_output_continue_one_sample(tokenizer):
    async def body(gateway, session):
        client = openai.AsyncOpenAI(base_url=gateway.base_url(), api_key=session.key, max_retries=0)
        first = await client.responses.create(
            model="m", instructions="Find my number.", input="Your guess?", tools=[RESPONSES_TOOL]
        )
        items = [{"role": "user", "content": "Your guess?"}]
        items += [item.model_dump(exclude_none=True) for item in first.output]
        call = first.output[-1]
        items.append({"type": "function_call_output", "call_id": call.call_id, "output": "higher"})
        second = await client.responses.create(
            model="m", instructions="Find my number.", input=items, tools=[RESPONSES_TOOL]
        )
        await client.close()
        return first, second

    engine, session, (first, second) = serve(tokenizer, ["Let me see. " + GUESS, "It is 3."], body)
    kinds = [item.type for item in first.output]
    assert kinds == ["message", "function_call"]
    assert first.output[0].content[0].text == "Let me see."
    assert first.output[1].name == "guess" and json.loads(first.output[1].arguments) == {
        "number": 3
    }
    assert first.status == "completed" and first.usage.output_tokens == len(engine.sampled[0])
    assert second.output_text == "It is 3."
    assert session.splits == 0 and len(session.segments) == 1
    assert engine.prompts[1][: len(engine.prompts[0])] == engine.prompts[0]
    assert "higher" in tokenizer.decode(engine.prompts[1][len(engine.prompts[0]) :])
    assert _trained(session) == engine.sampled[0] + engine.sampled[1]


def test_previous_response_id_continues_the_stored_conversation(tokenizer):
    async def body(gateway, session):
        client = openai.AsyncOpenAI(base_url=gateway.base_url(), api_key=session.key, max_retries=0)
        first = await client.responses.create(model="m", input="Hi", tools=[RESPONSES_TOOL])
        out = {
            "type": "function_call_output",
            "call_id": first.output[-1].call_id,
            "output": "lower",
        }
        second = await client.responses.create(
            model="m", input=[out], previous_response_id=first.id, tools=[RESPONSES_TOOL]
        )
        unstored = await client.responses.create(model="m", input="Hi", store=False)
        with pytest.raises(openai.BadRequestError, match="previous_response_id") as refused:
            await client.responses.create(model="m", input="x", previous_response_id=unstored.id)
        await client.close()
        return second, refused.value

    engine, session, (second, refused) = serve(tokenizer, [GUESS, "Done.", "Hello."], body)
    assert second.output_text == "Done."
    assert engine.prompts[1][: len(engine.prompts[0]) + len(engine.sampled[0])] == (
        engine.prompts[0] + engine.sampled[0]
    )
    assert session.splits == 1  # only the unstored third request started a new sample
    assert refused.status_code == 400


def test_a_streamed_response_ends_with_the_whole_response(tokenizer):
    async def body(gateway, session):
        client = openai.AsyncOpenAI(base_url=gateway.base_url(), api_key=session.key, max_retries=0)
        stream = await client.responses.create(
            model="m", input="Go", tools=[RESPONSES_TOOL], stream=True
        )
        events = [event async for event in stream]
        await client.close()
        return events

    _, _, events = serve(tokenizer, ["Sure. " + GUESS], body)
    types = [e.type for e in events]
    assert types[0] == "response.created" and types[-1] == "response.completed"
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == "Sure."
    args = [e.arguments for e in events if e.type == "response.function_call_arguments.done"]
    assert [json.loads(a) for a in args] == [{"number": 3}]
    done = events[-1].response
    assert [i.type for i in done.output] == ["message", "function_call"]


def test_a_response_cut_by_its_token_budget_is_completed_and_says_so(tokenizer):
    async def body(gateway, session):
        client = openai.AsyncOpenAI(base_url=gateway.base_url(), api_key=session.key, max_retries=0)
        reply = await client.responses.create(model="m", input="Hi", max_output_tokens=2)
        await client.close()
        return reply

    engine, _, reply = serve(tokenizer, ["a long answer that will not fit"], body)
    assert reply.status == "completed" and reply.incomplete_details.reason == "max_output_tokens"
    assert reply.usage.output_tokens == 2 == len(engine.sampled[0])


def test_responses_fields_the_gateway_cannot_honour_are_refused_by_name(tokenizer):
    async def body(gateway, session):
        client = openai.AsyncOpenAI(base_url=gateway.base_url(), api_key=session.key, max_retries=0)
        errors = []
        for extra in (
            {"reasoning": {"effort": "high"}},
            {"tools": [{"type": "web_search"}]},
            {"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]},
            {"text": {"verbosity": "low"}},
        ):
            with pytest.raises(openai.BadRequestError) as e:
                await client.responses.create(**{"model": "m", "input": "Hi", **extra})
            errors.append(e.value.body["message"])
        await client.close()
        return errors

    _, session, errors = serve(tokenizer, [], body)
    assert errors[0].startswith("reasoning is not supported by the mua gateway's /v1/responses")
    assert errors[1].startswith("tools[0] is 'web_search': the gateway serves function tools")
    assert errors[2].startswith("input[0].content[0] is input_image")
    assert errors[3].startswith("text.verbosity is not supported")
    assert session.turns == 0


# Messages API --------------------------------------------------------------------------------


def test_messages_tool_use_and_tool_result_continue_one_sample(tokenizer):
    async def body(gateway, session):
        root = f"http://{gateway.host}:{gateway.port}"
        head = {"x-api-key": session.key, "anthropic-version": "2023-06-01"}
        request = {
            "model": "m",
            "max_tokens": 64,
            "system": [{"type": "text", "text": "Find my number."}],
            "messages": [{"role": "user", "content": "Your guess?"}],
            "tools": [MESSAGES_TOOL],
        }
        status, _, text = await _post(gateway, "/v1/messages", request, head)
        first = json.loads(text)
        use = first["content"][-1]
        request["messages"] += [
            {"role": "assistant", "content": first["content"]},
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": use["id"], "content": "higher"},
                    {"type": "text", "text": "Again?"},
                ],
            },
        ]
        request["stop_sequences"] = ["STOP"]
        _, _, text = await _post(gateway, "/v1/messages", {**request, "stream": True}, head)
        del root
        return status, first, text

    engine, session, (status, first, stream) = serve(
        tokenizer, ["Hmm. " + GUESS, "It is 3. STOP and more"], body
    )
    assert status == 200
    assert [b["type"] for b in first["content"]] == ["text", "tool_use"]
    assert first["content"][1]["input"] == {"number": 3} and first["stop_reason"] == "tool_use"
    events = [json.loads(line[6:]) for line in stream.splitlines() if line.startswith("data: ")]
    assert [e["type"] for e in events][0] == "message_start"
    assert events[-1]["type"] == "message_stop"
    text = "".join(e["delta"].get("text", "") for e in events if e["type"] == "content_block_delta")
    assert text == "It is 3. "
    delta = next(e for e in events if e["type"] == "message_delta")["delta"]
    assert delta == {"stop_reason": "stop_sequence", "stop_sequence": "STOP"}
    assert session.splits == 0 and dict(session.apis) == {"messages": 2}
    assert engine.prompts[1][: len(engine.prompts[0])] == engine.prompts[0]
    assert _trained(session)[: len(engine.sampled[0])] == engine.sampled[0]


def test_messages_errors_are_in_anthropic_shape(tokenizer):
    async def body(gateway, session):
        head = {"x-api-key": session.key}
        ok = {"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "Hi"}]}
        return [
            await _post(gateway, "/v1/messages", {**ok, "top_k": 5}, head),
            await _post(
                gateway, "/v1/messages", {k: v for k, v in ok.items() if k != "max_tokens"}, head
            ),
            await _post(gateway, "/v1/messages", ok, {"x-api-key": "wrong"}),
            await _post(gateway, "/v1/messages", None, head, method="GET"),
        ]

    _, _, answers = serve(tokenizer, [], body)
    bodies = [json.loads(text) for _, _, text in answers]
    assert [status for status, _, _ in answers] == [400, 400, 401, 405]
    assert all(b["type"] == "error" for b in bodies)
    assert [b["error"]["type"] for b in bodies] == [
        "invalid_request_error",
        "invalid_request_error",
        "authentication_error",
        "invalid_request_error",
    ]
    assert bodies[0]["error"]["message"].startswith("top_k is not supported")
    assert bodies[1]["error"]["message"].startswith("max_tokens is required")
    assert "POST /v1/messages" in bodies[3]["error"]["message"]


# structured output and tool choice -----------------------------------------------------------


def test_structured_output_and_tool_choice_are_checked_and_counted(tokenizer):
    fmt = {"type": "json_schema", "json_schema": {"name": "a", "schema": SCHEMA}}
    named = {"type": "function", "function": {"name": "guess"}}

    async def body(gateway, session):
        client = openai.AsyncOpenAI(base_url=gateway.base_url(), api_key=session.key, max_retries=0)
        ask = [{"role": "user", "content": "Number?"}]
        replies = []
        for extra in (
            {"response_format": fmt},
            {"response_format": fmt},
            {"response_format": fmt},
            {"response_format": {"type": "json_object"}},
            {"tools": [CHAT_TOOL], "tool_choice": "required"},
            {"tools": [CHAT_TOOL], "tool_choice": named},
            {"tools": [CHAT_TOOL], "tool_choice": "required"},
        ):
            reply = await client.chat.completions.create(model="m", messages=ask, **extra)
            replies.append(reply.choices[0].message)
        with pytest.raises(openai.BadRequestError, match="not among the tools sent"):
            await client.chat.completions.create(
                model="m", messages=ask, tools=[CHAT_TOOL],
                tool_choice={"type": "function", "function": {"name": "other"}},
            )  # fmt: skip
        await client.close()
        return replies

    script = ['{"number": 4}', '{"number": "four"}', "four", "[1]", "four", "four", GUESS]
    _, session, replies = serve(tokenizer, script, body)
    # every reply comes back as the model wrote it
    assert [r.content for r in replies[:6]] == script[:6]
    assert replies[6].tool_calls[0].function.name == "guess"
    metrics = session.metrics()
    assert metrics["gateway/structured_invalid"] == 3  # a wrong type, not JSON, not an object
    assert metrics["gateway/tool_choice_unmet"] == 2  # no call under required and under named


def test_the_schema_check_follows_refs_and_closed_objects():
    schema = {
        "$defs": {"Move": {"type": "object", "properties": {"to": {"enum": ["a", "b"]}}}},
        "type": "object",
        "properties": {
            "moves": {"type": "array", "items": {"$ref": "#/$defs/Move"}},
            "note": {"anyOf": [{"type": "string"}, {"type": "null"}]},
        },
        "required": ["moves"],
        "additionalProperties": False,
    }
    assert follows({"moves": [{"to": "a"}], "note": None}, schema)
    assert not follows({"moves": [{"to": "c"}]}, schema)
    assert not follows({"moves": [], "extra": 1}, schema)
    assert not follows({"note": "x"}, schema)
    assert not follows({"moves": [], "note": 3}, schema)


# routes ---------------------------------------------------------------------------------------


def test_unknown_routes_and_methods_get_a_json_error_naming_the_routes(tokenizer):
    async def body(gateway, session):
        head = {"Authorization": f"Bearer {session.key}"}
        return [
            await _post(gateway, "/v1/completions", {}, head),
            await _post(gateway, "/v1/chat/completions", None, head, method="GET"),
        ]

    _, _, answers = serve(tokenizer, [], body)
    (missing, kind, text), (wrong_method, _, text2) = answers
    assert (missing, kind, wrong_method) == (404, "application/json", 405)
    message = json.loads(text)["error"]["message"]
    assert message.startswith("POST /v1/completions is not served; the gateway serves")
    for route in ("POST /v1/chat/completions", "POST /v1/responses", "POST /v1/messages"):
        assert route in message
    assert json.loads(text2)["error"]["message"].startswith(
        "GET /v1/chat/completions is not served"
    )
