"""The gateway under bad input and heavy requests, over real HTTP: bodies nested too deeply,
malformed `tool_calls` sent to `env/step`, a refused `max_completion_tokens` named as sent, the
`stop` search's cut (and that it decodes linearly), and a huge message tokenized off the event
loop while another session is answered."""

from __future__ import annotations

import asyncio
import threading

import aiohttp
import openai
import pytest

import mua.models.chat as chat
from mua.engines.engine_contract import GenerationResult
from mua.gateway.env_routes import EnvState
from mua.gateway.reply_reader import first_stop, stop_cut
from mua.gateway.server import MAX_JSON_DEPTH, Gateway
from mua.gateway.session import Session
from mua.gym import ResetResult, StepResult
from mua.models import load_tokenizer
from tests.fakes.scripted_engine import ScriptedEngine


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer("tiny:qwen2-1m")


class _RecordingEnv:
    """An env that answers every step with reward 1 and keeps the actions it was given."""

    def __init__(self):
        self.actions = []

    async def reset(self, task):
        return ResetResult(messages=[{"role": "user", "content": "go"}])

    async def step(self, action):
        self.actions.append(action)
        return StepResult(messages=[{"role": "user", "content": "ok"}], reward=1.0, done=False)

    async def close(self):
        return None


class _CappedEngine(ScriptedEngine):
    """A scripted engine that honours the request's `max_new_tokens` (finish `length`)."""

    async def generate(self, request):
        result = await super().generate(request)
        cap = request.sampling.max_new_tokens
        if len(result.token_ids) <= cap:
            return result
        return GenerationResult(result.token_ids[:cap], result.logprobs[:cap], "length")


async def _serve(tokenizer, replies, body, *, env=None):
    """Run `body(http, gateway, session)` against a started gateway; `http` posts raw bodies."""
    gateway = await Gateway(tokenizer, engine=_CappedEngine(tokenizer, replies)).start()
    try:
        context = {"env": EnvState(lambda: env, None, "hermes")} if env is not None else {}
        session = gateway.open_session(**context)
        headers = {"Authorization": f"Bearer {session.key}"}
        async with aiohttp.ClientSession(headers=headers) as http:
            return await body(http, gateway, session)
    finally:
        await gateway.close()


async def _post(http, url: str, data: str) -> tuple[int, dict]:
    async with http.post(url, data=data, headers={"Content-Type": "application/json"}) as r:
        return r.status, await r.json()


def test_a_deeply_nested_body_is_a_400_naming_the_limit(tokenizer):
    deep = '{"model": "m", "messages": ' + "[" * 100_000 + "]" * 100_000 + "}"
    shallow_but_over = '{"model": "m", "stop": ' + "[" * (MAX_JSON_DEPTH + 1) + "]" * (
        MAX_JSON_DEPTH + 1
    ) + "}"  # fmt: skip

    async def body(http, gateway, session):
        url = gateway.base_url() + "/chat/completions"
        return [await _post(http, url, deep), await _post(http, url, shallow_but_over)]

    for status, reply in asyncio.run(_serve(tokenizer, [], body)):
        assert status == 400
        assert reply["error"]["message"] == (
            f"the JSON body is nested more than {MAX_JSON_DEPTH} levels deep; "
            "the gateway reads at most that many: flatten it"
        )


@pytest.mark.parametrize(
    ("tool_calls", "said"),
    [
        ('"abc"', "message.tool_calls must be a list of"),
        ("[7]", "message.tool_calls[0] must be an object {id, type: function, function: "),
        ('[{"function": "x"}]', "message.tool_calls[0] must be an object {id, type: function"),
        ('[{"function": {"arguments": "{}"}}]', 'message.tool_calls[0]: tool call has no "name"'),
        (
            '[{"function": {"name": "guess", "arguments": "{not json"}}]',
            "message.tool_calls[0]: arguments of 'guess' are a string that is not JSON",
        ),
    ],
)
def test_malformed_tool_calls_on_env_step_are_a_400_and_never_reach_the_env(
    tokenizer, tool_calls, said
):
    env = _RecordingEnv()

    async def body(http, gateway, session):
        base = gateway.base_url()
        async with http.post(base + "/env/reset", json={}) as r:
            assert r.status == 200
        message = '{"message": {"role": "assistant", "content": "", "tool_calls": %s}}'
        bad = await _post(http, base + "/env/step", message % tool_calls)
        good_call = '[{"id": "c1", "function": {"name": "guess", "arguments": "{\\"n\\": 3}"}}]'
        good = await _post(http, base + "/env/step", message % good_call)
        return bad, good

    (status, reply), (good_status, good) = asyncio.run(_serve(tokenizer, [], body, env=env))
    assert status == 400 and reply["error"]["message"].startswith(said)
    assert good_status == 200 and good["reward"] == 1.0
    [action] = env.actions  # only the good step reached the env
    assert [(c.name, c.arguments, c.id) for c in action.tool_calls] == [("guess", {"n": 3}, "c1")]


@pytest.mark.parametrize(
    ("extra", "said", "param"),
    [
        (
            {"max_completion_tokens": 0},
            "max_completion_tokens must be a positive integer, got 0",
            "max_completion_tokens",
        ),
        ({"max_tokens": -1}, "max_tokens must be a positive integer, got -1", "max_tokens"),
        (
            {"max_tokens": 5, "max_completion_tokens": 7},
            "max_tokens (5) and max_completion_tokens (7) disagree; send one of them",
            "max_completion_tokens",
        ),
    ],
)
def test_a_refused_token_limit_names_the_field_sent(tokenizer, extra, said, param):
    async def body(http, gateway, session):
        client = openai.AsyncOpenAI(base_url=gateway.base_url(), api_key=session.key, max_retries=0)
        with pytest.raises(openai.BadRequestError) as err:
            await client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "x"}], **extra
            )
        await client.close()
        return err.value

    err = asyncio.run(_serve(tokenizer, ["unused"], body))
    assert err.body["message"] == said and err.body["param"] == param


def test_a_null_max_completion_tokens_leaves_max_tokens_in_force(tokenizer):
    async def body(http, gateway, session):
        payload = {
            "model": "m",
            "messages": [{"role": "user", "content": "x"}],
            "max_tokens": 2,
            "max_completion_tokens": None,
        }
        async with http.post(gateway.base_url() + "/chat/completions", json=payload) as r:
            return r.status, await r.json()

    status, reply = asyncio.run(_serve(tokenizer, ["one two three four five six"], body))
    assert status == 200
    assert reply["usage"]["completion_tokens"] == 2
    assert reply["choices"][0]["finish_reason"] == "length"


def test_the_stop_cut_decodes_each_token_a_bounded_number_of_times(tokenizer, monkeypatch):
    words = " ".join(f"w{i}" for i in range(60))  # within the 256 new tokens
    decoded = []
    real = chat.decode_ids

    def counting(tok, ids):
        decoded.append(len(ids))
        return real(tok, ids)

    async def body(http, gateway, session):
        monkeypatch.setattr(chat, "decode_ids", counting)
        payload = {"model": "m", "messages": [{"role": "user", "content": "x"}], "stop": ["w55"]}
        async with http.post(gateway.base_url() + "/chat/completions", json=payload) as r:
            return r.status, await r.json()

    status, reply = asyncio.run(_serve(tokenizer, [words], body))
    assert status == 200
    assert reply["choices"][0]["message"]["content"] == words[: words.index("w55")]
    sampled = len(tokenizer.encode(words + "<|im_end|>", add_special_tokens=False))
    assert sum(decoded) <= 20 * sampled  # every prefix decoded would be sampled**2 / 2


def test_a_huge_message_is_tokenized_off_the_event_loop(tokenizer, monkeypatch):
    """While one session's 600 kB message is being tokenized, another session is answered."""
    real, release = chat.encode_text, threading.Event()

    entered = threading.Event()

    def held_encode(tok, text):
        if len(text) > 500_000:  # hold the huge one until the small request is answered
            entered.set()
            release.wait(5)
        return real(tok, text)

    monkeypatch.setattr(chat, "encode_text", held_encode)
    huge = "word " * 120_000

    async def body(http, gateway, session):
        other = gateway.open_session()
        order = []

        async def ask(key, text):
            payload = {"model": "m", "messages": [{"role": "user", "content": text}]}
            headers = {"Authorization": f"Bearer {key}"}
            url = gateway.base_url() + "/chat/completions"
            async with http.post(url, json=payload, headers=headers) as r:
                assert r.status == 200
            order.append("huge" if len(text) > 100 else "small")

        big = asyncio.ensure_future(ask(session.key, huge))
        assert await asyncio.to_thread(entered.wait, 10)
        await ask(other.key, "hi")
        release.set()
        await big
        return order

    order = asyncio.run(_serve(tokenizer, ["ok", "ok"], body))
    assert order == ["small", "huge"]


def _scan_every_prefix(decode, ids, text, stops):
    """The cut as a scan of every prefix finds it (quadratic): the reference."""
    at = first_stop(text, stops)
    if at is None:
        return None
    hits = (k for k in range(1, len(ids) + 1) if first_stop(decode(ids[:k]), stops) is not None)
    return next(hits, len(ids)), at


def test_the_linear_stop_cut_matches_a_scan_of_every_prefix(tokenizer):
    text = "xabcdy café ☕ naïve 日本語 tail. The end, or is it?"
    ids = tokenizer.encode(text, add_special_tokens=False)
    decode = Session("k", tokenizer).renderer([]).decode
    cases = [
        ["abcd", "bc"],
        ["☕"],
        ["日本"],
        ["é ☕ n"],
        ["?"],
        ["is it?"],
        ["zzz"],
        ["語 t", "x"],
    ]
    cases += [[text[i : i + 3]] for i in range(0, len(text) - 3, 2)]
    for stops in cases:
        assert stop_cut(decode, ids, text, stops) == _scan_every_prefix(decode, ids, text, stops), (
            stops
        )
