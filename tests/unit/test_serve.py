"""`mua serve`: the OpenAI chat endpoint (as a simulated user's backend), info endpoints, the CLI."""

from __future__ import annotations

import asyncio
import json
import urllib.request

from mua.config.users import LLMUserConfig
from mua.llm.llm_client import make_llm_client
from mua.models import load_tokenizer
from mua.serve import serve_model

MODEL = "tiny:qwen2-1m"


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
    assert info["mua_serve"] is True and info["version"] == "0.5.23"  # the release emulated
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
    from tests.integration.train_helpers import mua_serve

    with mua_serve(MODEL) as url:
        assert _get(url + "/health") == {}


def test_cli_serve_bad_model_is_one_line(mua_cli):
    code, out, err = mua_cli("serve", "--model", "tiny:nope", "--port", "0")
    assert code == 2 and "unknown tiny model" in err and "Traceback" not in err


# ---- what an emulated SGLang release accepts and refuses -------------------------------------


def _status(url: str, body: dict) -> tuple[int, dict]:
    import urllib.error

    try:
        return 200, _post(url, body)
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read() or b"{}")


def test_resume_of_a_tag_never_released_is_refused(server):
    status, body = _status(server.url + "/resume_memory_occupation", {"tags": ["weights"]})
    assert status == 400 and "not released" in body["message"]
    assert _status(server.url + "/release_memory_occupation", {})[0] == 200
    assert server.released_tags == {"weights", "kv_cache", "cuda_graph"}
    assert _status(server.url + "/resume_memory_occupation", {})[0] == 200


def test_release_while_a_request_runs_is_refused(server):
    body = {"input_ids": [5, 6, 7], "sampling_params": {"max_new_tokens": 2}}
    server._running["blocker"] = 1  # a request in flight, as when one is still decoding
    try:
        status, reply = _status(server.url + "/release_memory_occupation", {})
        assert status == 400 and "idle" in reply["message"]
        # ... and the same rid twice in flight is refused as SGLang >= 0.5.12 does
        status, reply = _status(server.url + "/generate", {**body, "rid": "blocker"})
        assert status == 400 and "Duplicate request ID" in reply["error"]["message"]
    finally:
        server._running.pop("blocker", None)
    assert server.released_tags == set()
    assert _status(server.url + "/generate", {**body, "rid": "blocker"})[0] == 200


def test_tensor_push_needs_a_session_on_0_5_23(server):
    import torch as t

    from mua.engines.sglang.weight_sync import tensor_push_body

    weights = dict(server.engine.model.named_parameters())
    name = next(iter(weights))
    body = tensor_push_body([(name, weights[name].detach().clone())], tp_size=1, flush_cache=True)
    status, reply = _status(server.url + "/update_weights_from_tensor", body)
    assert status == 400 and reply["success"] is False and "begin_weight_update" in reply["message"]
    assert _status(server.url + "/begin_weight_update", {})[0] == 200
    assert _status(server.url + "/begin_weight_update", {})[0] == 400  # one session at a time
    assert _status(server.url + "/update_weights_from_tensor", body) == (
        200,
        {"success": True, "message": "loaded 1 tensors", "num_paused_requests": 0},
    )
    assert _status(server.url + "/end_weight_update", {})[0] == 200
    assert (
        _status(server.url + "/update_weights_from_tensor", {**body, "load_format": "x"})[0] == 400
    )
    assert t.is_tensor(weights[name])


def test_an_older_release_is_emulated():
    srv = serve_model(MODEL, sglang_release="0.4.9.post6")
    try:
        info = _get(srv.url + "/get_server_info")
        assert info["version"] == "0.4.9.post6" and info["enable_deterministic_inference"] is False
        seeded = {"input_ids": [5, 6], "sampling_params": {"max_new_tokens": 2, "sampling_seed": 1}}
        status, reply = _status(srv.url + "/generate", seeded)
        assert status == 400 and "sampling_seed" in reply["error"]["message"]
        assert _status(srv.url + "/begin_weight_update", {})[0] == 404  # no sessions before 0.5.21
        status, _ = _status(srv.url + "/release_memory_occupation", {"tags": ["cuda_graph"]})
        assert status == 400  # 0.4.x knows weights and kv_cache only
        assert _status(srv.url + "/release_memory_occupation", {})[0] == 200
        assert srv.released_tags == {"weights", "kv_cache"}
    finally:
        srv.stop()


def test_cli_refuses_an_unknown_release(mua_cli):
    code, _, err = mua_cli("serve", "--model", MODEL, "--sglang-release", "0.3.0")
    assert code == 2 and "--sglang-release 0.3.0" in err and "0.5.23" in err
