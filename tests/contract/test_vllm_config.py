"""The vllm engine's recipe section, launch command and request/answer shapes, without a server:
one-line refusals of a recipe that names no server or a Python without vLLM, the flags every
launched server gets, its key (in its environment, checked on every route by mua's key guard and
sent by the client), LoRA ranks rounded up to vLLM's choices, and what a completion body carries
and how an answer is read."""

from __future__ import annotations

import sys

import pytest

from mua.config.rollout import RolloutConfig
from mua.engines.engine_contract import GenerationRequest, SamplingParams
from mua.engines.vllm import vllm_launch
from mua.engines.vllm.vllm_engine import completion_body, parse_completion
from mua.errors import UsageError


def test_a_vllm_recipe_must_name_a_server():
    with pytest.raises(ValueError, match="rollout.engine=vllm needs rollout.vllm.python") as err:
        RolloutConfig(engine="vllm")
    assert "rollout.vllm.base_urls" in str(err.value)
    assert RolloutConfig(engine="vllm", vllm={"base_urls": ["http://h:1"]}).vllm.python is None


def test_a_python_without_vllm_is_one_line(tmp_path):
    with pytest.raises(UsageError, match="is not an executable") as err:
        vllm_launch.check_python(str(tmp_path / "python"))
    assert "\n" not in str(err.value)
    with pytest.raises(UsageError, match="cannot import vllm"):
        vllm_launch.check_python(sys.executable)  # mua's own Python has no vLLM


def test_launch_command_carries_what_mua_relies_on():
    cmd = vllm_launch.launch_command("/py", "/m", port=9, lora_rank=12, extra_args=["--x"])
    joined = " ".join(cmd)
    assert cmd[:3] == ["/py", "-m", "vllm.entrypoints.openai.api_server"]
    for flag in (
        "--logprobs-mode processed_logprobs",
        "--generation-config vllm",
        f"--worker-extension-cls {vllm_launch.EXTENSION_CLASS}",
        "--enforce-eager",
        "--enable-lora --max-lora-rank 16",
    ):
        assert flag in joined
    assert cmd[-1] == "--x"
    assert [vllm_launch.max_lora_rank(r) for r in (1, 2, 8, 9, 64)] == [1, 8, 8, 16, 64]
    with pytest.raises(UsageError, match="above vLLM's largest LoRA rank"):
        vllm_launch.max_lora_rank(1000)


def test_server_env_puts_only_the_extension_on_the_path(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", "/mua/checkout")
    monkeypatch.setenv("MASTER_PORT", "1234")
    monkeypatch.setenv("VLLM_ALLOW_INSECURE_SERIALIZATION", "1")
    env = vllm_launch.server_env("/ext", 2, "k3y")
    assert env["PYTHONPATH"] == "/ext" and "MASTER_PORT" not in env
    assert env["VLLM_SERVER_DEV_MODE"] == "1" and env["VLLM_CPU_KVCACHE_SPACE"] == "2"
    # the key travels in the environment; pickles only where the ipc backend needs them
    assert env["VLLM_API_KEY"] == "k3y" and "VLLM_ALLOW_INSECURE_SERIALIZATION" not in env
    assert "VLLM_ALLOW_INSECURE_SERIALIZATION" not in vllm_launch.server_env("/e", 2, "k", 0)
    ipc = vllm_launch.server_env("/e", 2, "k", cuda_device=0, ipc_transfer=True)
    assert ipc["VLLM_ALLOW_INSECURE_SERIALIZATION"] == "1"


def test_the_key_guard_goes_with_the_extension_and_the_key_stays_off_the_command():
    import os

    cmd = vllm_launch.launch_command("/py", "/m", port=9)
    assert cmd[cmd.index("--middleware") + 1] == "mua_vllm_key_guard.RequireKey"
    assert "--api-key" not in cmd
    folder = vllm_launch.extension_dir()
    try:
        assert sorted(os.listdir(folder)) == [
            "mua_vllm_key_guard.py",
            "mua_vllm_worker_extension.py",
        ]
    finally:
        import shutil

        shutil.rmtree(folder)


def _asgi_status(guard, path: str, authorization: str | None) -> int:
    """The status `guard` (wrapping an app that answers 200) gives a request to `path`."""
    import asyncio

    async def app(scope, receive, send):
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})

    sent = []

    async def send(message):
        sent.append(message)

    async def receive():
        return {"type": "http.request", "body": b""}

    headers = [] if authorization is None else [(b"authorization", authorization.encode())]
    scope = {"type": "http", "method": "POST", "path": path, "headers": headers}
    asyncio.run(guard(app)(scope, receive, send))
    return sent[0]["status"]


def test_the_key_guard_refuses_every_route_without_the_key(monkeypatch):
    from mua.engines.vllm.key_guard import RequireKey

    monkeypatch.setenv("VLLM_API_KEY", "s3cret")
    for path in ("/collective_rpc", "/reset_prefix_cache", "/sleep", "/health", "/v1/models"):
        assert _asgi_status(RequireKey, path, None) == 401
        assert _asgi_status(RequireKey, path, "Bearer wrong") == 401
        assert _asgi_status(RequireKey, path, "Bearer s3cret") == 200
    monkeypatch.delenv("VLLM_API_KEY")
    with pytest.raises(RuntimeError, match=r"\$VLLM_API_KEY is not set"):
        RequireKey(None)


def test_the_client_sends_the_key_with_every_request():
    import asyncio

    from mua.engines.vllm.vllm_engine import VLLMEngine
    from tests.contract.keyed_standin import KeyedServer

    with KeyedServer("s3cret") as server:
        engine = VLLMEngine(server.url, api_key="s3cret")

        async def calls():
            try:
                await engine.call("GET", "/health")
                await engine.call("POST", "/collective_rpc", {"method": "m"})
            finally:
                await engine.close_connections()

        asyncio.run(calls())
        assert server.seen == [
            ("/health", "Bearer s3cret"),
            ("/collective_rpc", "Bearer s3cret"),
        ]
        assert server.status_without_key("/collective_rpc") == 401


def test_servers_at_base_urls_get_the_key_api_key_env_names(monkeypatch):
    import asyncio

    from tests.contract.keyed_standin import KeyedServer

    with KeyedServer("k3y") as server:
        section = {"base_urls": [server.url], "api_key_env": "MY_VLLM_KEY"}
        cfg = RolloutConfig(engine="vllm", vllm=section).vllm
        with pytest.raises(UsageError, match="api_key_env names MY_VLLM_KEY, which is not set"):
            vllm_launch.engine_from_config(cfg, "unused", index=0)
        monkeypatch.setenv("MY_VLLM_KEY", "k3y")
        engine = vllm_launch.engine_from_config(cfg, "unused", index=0)

        async def call():
            try:
                await engine.call("GET", "/health")
            finally:
                await engine.close_connections()

        asyncio.run(call())
        assert server.seen == [("/health", "Bearer k3y")]


def test_completion_body_and_answer():
    sampling = SamplingParams(
        temperature=0.5, top_k=0, max_new_tokens=3, stop_token_ids=[2], seed=4
    )
    body = completion_body(GenerationRequest([5, 6], sampling), "m")
    assert body["prompt"] == [5, 6] and body["top_k"] == -1 and body["logprobs"] == 0
    assert body["stop_token_ids"] == [2] and "seed" not in body
    assert completion_body(GenerationRequest([5], sampling), "m", seeds=True)["seed"] == 4
    answer = {
        "choices": [
            {
                "logprobs": {
                    "token_logprobs": [-0.5, -1.0],
                    "tokens": ["token_id:7", "token_id:2"],
                },
                "finish_reason": "stop",
            }
        ]
    }
    result = parse_completion(answer)
    assert result.token_ids == [7, 2] and result.logprobs == [-0.5, -1.0]
    assert result.finish_reason == "stop"
    answer["choices"][0]["token_ids"] = [7]
    with pytest.raises(ValueError, match="1 token ids but 2 log-probs"):
        parse_completion(answer)
    with pytest.raises(ValueError, match="not a completion"):
        parse_completion({"choices": []})
