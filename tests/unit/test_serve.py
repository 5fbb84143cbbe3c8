"""`mua serve`: the OpenAI chat endpoint (as a simulated user's backend), info endpoints, the CLI."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
import urllib.request

import pytest
import torch

from mua.config.rollout import LLMUserConfig
from mua.models import load_tokenizer
from mua.rollout.llm_client import make_llm_client
from mua.serve import serve_model

MODEL = "tiny:qwen2-1m"


@pytest.fixture(scope="module")
def server():
    torch.set_num_threads(1)
    srv = serve_model(MODEL)
    yield srv
    srv.stop()


def _get(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=30) as resp:
        return json.loads(resp.read())


def _post(url: str, body: dict) -> dict:
    req = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        method="POST",
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=60) as resp:
        return json.loads(resp.read())


def test_chat_completion_renders_the_template_and_decodes(server):
    messages = [
        {"role": "system", "content": "You are a customer."},
        {"role": "user", "content": "Hello"},
    ]
    reply = _post(
        server.url + "/v1/chat/completions",
        {"model": "user-sim", "messages": messages, "max_tokens": 5, "temperature": 0},
    )
    choice = reply["choices"][0]
    assert choice["message"]["role"] == "assistant" and choice["finish_reason"] in (
        "stop",
        "length",
    )
    tok = load_tokenizer(MODEL)
    prompt = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    assert reply["usage"]["prompt_tokens"] == len(tok.encode(prompt, add_special_tokens=False))
    # the same greedy tokens through the native endpoint decode to the same text
    ids = tok.encode(prompt, add_special_tokens=False)
    native = _post(
        server.url + "/generate",
        {
            "input_ids": ids,
            "sampling_params": {
                "temperature": 0,
                "max_new_tokens": 5,
                "stop_token_ids": [tok.eos_token_id],
            },
            "return_logprob": True,
        },
    )
    assert choice["message"]["content"] == tok.decode(
        native["output_ids"], skip_special_tokens=True
    )
    assert reply["usage"]["completion_tokens"] == len(native["output_ids"])


def test_a_local_model_serves_as_the_llm_user(server):
    cfg = LLMUserConfig(
        base_url=server.url + "/v1", model="local-user", max_tokens=8, max_retries=0
    )
    client = make_llm_client(cfg)

    async def ask():
        try:
            return await client.complete([{"role": "user", "content": "Say hi"}])
        finally:
            await client.aclose()

    text = asyncio.run(ask())
    assert isinstance(text, str) and client.counters["requests"] >= 1


def test_info_endpoints(server):
    assert _get(server.url + "/get_model_info")["model_path"] == MODEL
    info = _get(server.url + "/get_server_info")
    assert info["mua_serve"] is True and info["tensor_load_formats"] == ["mua_safetensors"]
    assert _get(server.url + "/v1/models")["data"][0]["id"] == MODEL
    assert _get(server.url + "/health") == {}


def test_batch_generate_returns_one_response_per_prompt(server):
    out = _post(
        server.url + "/generate",
        {
            "input_ids": [[5, 6, 7], [8, 9]],
            "return_logprob": True,
            "sampling_params": {"temperature": 0, "max_new_tokens": 3},
        },
    )
    assert isinstance(out, list) and len(out) == 2
    assert all(len(o["meta_info"]["output_token_logprobs"]) == 3 for o in out)
    assert out[1]["meta_info"]["prompt_tokens"] == 2


def test_a_follow_up_generate_reuses_the_earlier_kv_until_the_cache_is_flushed(server):
    """/generate carries no route key: a prompt extending an earlier one is matched by content
    (SGLang's radix-cache behaviour), the numbers do not change, and /flush_cache drops it."""
    stats = server.engine.stats

    def generate(ids: list[int]) -> dict:
        body = {
            "input_ids": ids,
            "return_logprob": True,
            "sampling_params": {"temperature": 0, "max_new_tokens": 4},
        }
        return _post(server.url + "/generate", body)

    first_prompt = list(range(100, 130))
    first = generate(first_prompt)
    sampled = [t for _, t, _ in first["meta_info"]["output_token_logprobs"]]
    follow_up = first_prompt + sampled + [7, 8, 9]
    hits = stats["prefix_hits"]
    warm = generate(follow_up)
    assert stats["prefix_hits"] == hits + 1
    _post(server.url + "/flush_cache", {})
    cold = generate(follow_up)
    assert stats["prefix_hits"] == hits + 1  # nothing left to reuse after the flush
    warm_lp = warm["meta_info"]["output_token_logprobs"]
    cold_lp = cold["meta_info"]["output_token_logprobs"]
    assert [t for _, t, _ in warm_lp] == [t for _, t, _ in cold_lp]
    assert max(abs(a[0] - b[0]) for a, b in zip(warm_lp, cold_lp, strict=True)) < 1e-5


def test_cli_serve_starts_and_answers():
    env = {**os.environ, "COLUMNS": "200", "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "mua.cli.main", "serve", "--model", MODEL, "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    try:
        line = ""
        deadline = time.monotonic() + 120
        while "http://" not in line and time.monotonic() < deadline:
            line = proc.stdout.readline()
            assert line or proc.poll() is None, "mua serve exited before printing its address"
        url = line.split(" at ", 1)[1].split()[0]
        assert _get(url + "/health") == {}
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_cli_serve_bad_model_is_one_line(mua_cli):
    code, out, err = mua_cli("serve", "--model", "tiny:nope", "--port", "0")
    assert code == 2 and "unknown tiny model" in err and "Traceback" not in err
