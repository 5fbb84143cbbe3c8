"""Routed experts from vLLM (mixture of experts, rollout routing replay), against vLLM 0.32's own
code in its CPU side venv (tests/.vllm/0.32.0).

vLLM 0.32's CPU build cannot return routed experts: `--enable-return-routed-experts` needs its V2
model runner, which needs Triton, which the CPU build lacks. The first test pins both refusals
(vLLM's own config validation, the check its server runs at start). The second checks mua's side
of the token-in/token-out route with vLLM's own code: the body mua sends validates as vLLM's
`GenerateRequest` with the sampling mua asked for, and the answer vLLM's
`ServingTokens.serve_tokens_full_generator` makes of a finished request reads back in mua as the
same tokens, log-probs and routed experts ([tokens, layers, k], compact uint8). The third
starts a real server, pushes another MoE's weights into it and checks its log-probs.
"""

from __future__ import annotations

import json
import subprocess

import numpy as np
import pytest

from mua.engines.engine_contract import GenerationRequest, SamplingParams
from mua.engines.vllm.vllm_engine import generate_body, parse_generate
from tests.contract.vllm_side import REPO, side_python

SIDE_SCRIPT = REPO / "tests" / "contract" / "vllm_token_route_side.py"


def _side(*args: str, stdin: str = "") -> dict:
    res = subprocess.run(
        [side_python("0.32.0"), str(SIDE_SCRIPT), *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=300,
        env={"PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1", "VLLM_LOGGING_LEVEL": "ERROR"},
    )
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads(res.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def moe_folder(tmp_path_factory):
    from mua.models import load_tokenizer
    from mua.models.saving import save_hf
    from mua.models.tiny import TINY_PRESETS, build_tiny_model

    out = tmp_path_factory.mktemp("vllm-moe") / "m"
    model = build_tiny_model(TINY_PRESETS["qwen3moe-2m"], seed=0)
    return save_hf(model, load_tokenizer("tiny:qwen3moe-2m"), out)


def test_vllm_032_cpu_refuses_to_return_routed_experts(moe_folder):
    refused = _side("refusal", str(moe_folder))
    assert "AuxOutput Connector requires Model Runner V2" in refused["default"]
    assert "Model Runner V2 requires Triton" in refused["v2"]


def test_token_route_request_and_answer_with_vllm_own_code():
    request = GenerationRequest(
        prompt_ids=list(range(5, 15)),
        sampling=SamplingParams(temperature=0.7, max_new_tokens=4, stop_token_ids=[2]),
    )
    tokens, logprobs = [9, 8, 7, 2], [-0.5, -1.0, -2.0, -0.125]
    # every fed token: the 10 prompt tokens and the sampled ones but the last
    routes = np.random.default_rng(0).integers(0, 8, size=(13, 4, 2))
    spec = {
        "body": generate_body(request, "m"),
        "token_ids": tokens,
        "logprobs": logprobs,
        "routed_experts": routes.tolist(),
    }
    out = _side("answer", stdin=json.dumps(spec))
    assert out["sampling"] == {
        "max_tokens": 4, "temperature": 0.7, "logprobs": 0, "stop_token_ids": [2], "top_k": -1,
    }  # fmt: skip
    result = parse_generate(out["response"])
    assert (result.token_ids, result.logprobs, result.finish_reason) == (tokens, logprobs, "stop")
    record = result.meta["routed_experts"]
    assert record.dtype == np.uint8 and np.array_equal(record, routes)


@pytest.mark.timeout(900)
def test_a_pushed_mixture_of_experts_is_exact_on_vllm_cpu(moe_folder, tmp_path):
    """vLLM's CPU MoE kernel packs its experts on the first load only: mua's worker extension
    packs them again after a push (and the push names them per expert), so log-probs after a
    push equal the pushed model's."""
    import asyncio

    import torch

    from mua.engines.vllm.colocated import VLLMColocated
    from mua.engines.vllm.settings import VLLMConfig
    from mua.engines.vllm.vllm_launch import engine_from_config
    from mua.models.tiny import TINY_PRESETS, build_tiny_model
    from tests.conftest import free_port

    cfg = VLLMConfig(python=side_python("0.32.0"), port=free_port(),
                     extra_args=["--max-model-len", "512"])  # fmt: skip
    engine = engine_from_config(cfg, str(moe_folder), bucket_mb=1, log_dir=str(tmp_path))
    pushed = build_tiny_model(TINY_PRESETS["qwen3moe-2m"], seed=1)
    prompt = list(range(5, 40))

    async def run():
        await VLLMColocated(engine, model_type="qwen3_moe").push_full(
            pushed.state_dict().items(), "1"
        )
        return await engine.generate(
            GenerationRequest(prompt_ids=prompt, sampling=SamplingParams(max_new_tokens=16))
        )

    try:
        result = asyncio.run(run())
    finally:
        asyncio.run(engine.close())
    ids = prompt + result.token_ids
    with torch.no_grad():
        logp = torch.log_softmax(pushed(torch.tensor([ids])).logits[0].float(), -1)
    mine = [float(logp[len(prompt) - 1 + i, t]) for i, t in enumerate(result.token_ids)]
    assert max(abs(a - b) for a, b in zip(mine, result.logprobs, strict=True)) < 1e-4
