"""Run by a vLLM side venv's Python (tests/contract/test_vllm_routed_experts.py): vLLM's own code
for its token-in/token-out route, without a server.

`refusal FOLDER`: the error vLLM's config validation gives `--enable-return-routed-experts` on
this build, with the default model runner and with VLLM_USE_V2_MODEL_RUNNER=1 (printed as JSON).
`answer`: reads {"body": mua's request body, "token_ids", "logprobs", "routed_experts"} on stdin,
validates the body with vLLM's `GenerateRequest`, and prints the JSON answer vLLM's
`ServingTokens.serve_tokens_full_generator` makes of a finished request with those outputs.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys


def refusal(folder: str) -> dict:
    from vllm.engine.arg_utils import EngineArgs

    out = {}
    for runner in ("default", "v2"):
        if runner == "v2":
            os.environ["VLLM_USE_V2_MODEL_RUNNER"] = "1"
        try:
            EngineArgs(
                model=folder, enable_return_routed_experts=True, enforce_eager=True,
                dtype="float32", max_model_len=512,
            ).create_engine_config()  # fmt: skip
            out[runner] = "accepted"
        except Exception as err:  # noqa: BLE001 - the message is the point
            out[runner] = str(err)
    return out


def answer(spec: dict) -> str:
    import numpy as np
    from vllm.entrypoints.generate.base.protocol import RequestResponseMetadata
    from vllm.entrypoints.scale_out.token_in_token_out.protocol import GenerateRequest
    from vllm.entrypoints.scale_out.token_in_token_out.serving import ServingTokens
    from vllm.logprobs import Logprob
    from vllm.outputs import CompletionOutput, RequestOutput

    request = GenerateRequest.model_validate(spec["body"])
    tokens = spec["token_ids"]
    output = CompletionOutput(
        index=0,
        text="",
        token_ids=tokens,
        cumulative_logprob=None,
        logprobs=[{t: Logprob(logprob=v, rank=1)} for t, v in zip(tokens, spec["logprobs"])],
        routed_experts=np.asarray(spec["routed_experts"], dtype=np.int32),
        finish_reason="stop",
    )
    final = RequestOutput(
        "r", None, request.token_ids, None, [output], finished=True, num_cached_tokens=0
    )

    async def results():
        yield final

    serving = ServingTokens.__new__(ServingTokens)  # the response code only: no engine
    serving.return_tokens_as_token_ids = True
    serving.enable_prompt_tokens_details = False
    serving.enable_log_outputs = False
    serving.request_logger = None
    response = asyncio.run(
        serving.serve_tokens_full_generator(
            request, results(), "r", "m", RequestResponseMetadata(request_id="r")
        )
    )
    sampling = request.sampling_params
    return json.dumps(
        {
            "response": json.loads(response.model_dump_json()),
            "sampling": {
                "max_tokens": sampling.max_tokens,
                "temperature": sampling.temperature,
                "logprobs": sampling.logprobs,
                "stop_token_ids": list(sampling.stop_token_ids or []),
                "top_k": sampling.top_k,
            },
        }
    )


if __name__ == "__main__":
    if sys.argv[1] == "refusal":
        print(json.dumps(refusal(sys.argv[2])))
    else:
        print(answer(json.loads(sys.stdin.read())))
