"""The vllm engine's recipe section, launch command and request/answer shapes, without a server:
one-line refusals of a recipe that names no server or a Python without vLLM, the flags every
launched server gets, LoRA ranks rounded up to vLLM's choices, and what a completion body carries
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
    env = vllm_launch.server_env("/ext", 2)
    assert env["PYTHONPATH"] == "/ext" and "MASTER_PORT" not in env
    assert env["VLLM_SERVER_DEV_MODE"] == "1" and env["VLLM_CPU_KVCACHE_SPACE"] == "2"


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
