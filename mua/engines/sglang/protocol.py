"""The JSON shapes of SGLang's native HTTP protocol, as both mua's client and mua's server use them.

One place turns a `GenerationRequest` into a `/generate` body (SGLang's `GenerateReqInput`) and a
response into a `GenerationResult`, so the client that drives a real SGLang server is the code CI
runs against `mua serve`. `sampling_seed` is sent only to a server that honours it; log-probs are
log_softmax(logits / T) of the sampled token (docs/sglang.md, "The protocol").
Not here: HTTP transport, streaming, text prompts, multimodal inputs, prompt log-probs.
"""

from __future__ import annotations

import json
from typing import Any

from mua.engines.engine_contract import GenerationRequest, GenerationResult, SamplingParams

FINISH_TYPES = ("stop", "length", "abort")


class ProtocolError(ValueError):
    """A request or response that does not have the protocol's shape."""


def sampling_to_json(params: SamplingParams, send_seed: bool = False) -> dict[str, Any]:
    body: dict[str, Any] = {
        "max_new_tokens": int(params.max_new_tokens),
        "temperature": float(params.temperature),
        "top_p": float(params.top_p),
        "top_k": int(params.top_k) if params.top_k > 0 else -1,
        "stop_token_ids": [int(t) for t in params.stop_token_ids],
        # The trainer needs every sampled token, the stop token included, and no text edits.
        "skip_special_tokens": False,
        "no_stop_trim": True,
    }
    if send_seed and params.seed is not None:
        body["sampling_seed"] = int(params.seed)
    return body


def sampling_from_json(body: dict[str, Any] | None) -> SamplingParams:
    body = dict(body or {})
    top_k = int(body.get("top_k", -1))
    seed = body.get("sampling_seed", body.get("seed"))
    return SamplingParams(
        temperature=float(body.get("temperature", 1.0)),
        top_p=float(body.get("top_p", 1.0)),
        top_k=top_k if top_k > 0 else 0,
        max_new_tokens=int(body.get("max_new_tokens", 128)),
        stop_token_ids=[int(t) for t in body.get("stop_token_ids") or []],
        seed=None if seed is None else int(seed),
    )


def generate_body(
    request: GenerationRequest,
    rid: str | None = None,
    send_seed: bool = False,
    lora_path: str | None = None,
    routed_experts: bool = False,
) -> dict[str, Any]:
    """The `/generate` body; `rid` overrides the request's id (the client makes it unique);
    `lora_path` names the LoRA adapter to generate with (a loaded adapter's name);
    `routed_experts` asks for every fed token's experts (SGLang >= 0.5.23)."""
    body: dict[str, Any] = {
        "input_ids": list(map(int, request.prompt_ids)),
        "sampling_params": sampling_to_json(request.sampling, send_seed),
        "return_logprob": True,
        "logprob_start_len": -1,
    }
    rid = rid or request.request_id
    if rid:
        body["rid"] = rid
    if lora_path is not None:
        body["lora_path"] = lora_path
    if routed_experts:
        body["return_routed_experts"] = True  # from token 0 (routed_experts_start_len 0)
    return body


def generate_body_json(
    request: GenerationRequest,
    ids_json: str,
    rid: str | None = None,
    send_seed: bool = False,
    lora_path: str | None = None,
    routed_experts: bool = False,
) -> bytes:
    """`json.dumps(generate_body(request, rid, send_seed, ...)).encode()`, given `ids_json`, the
    JSON text of the prompt ids (a client extending one prompt turn after turn keeps it)."""
    empty = GenerationRequest(
        prompt_ids=[], sampling=request.sampling, request_id=request.request_id
    )
    text = json.dumps(generate_body(empty, rid, send_seed, lora_path, routed_experts))
    head = '{"input_ids": []'  # input_ids is the body's first key
    return ('{"input_ids": ' + ids_json + text[len(head) :]).encode()


def _finish_type(finish: Any) -> str:
    if isinstance(finish, dict):
        kind = finish.get("type")
    else:
        kind = finish
    if kind not in FINISH_TYPES:
        raise ProtocolError(f"unknown finish_reason {finish!r}; expected one of {FINISH_TYPES}")
    return kind


def parse_generate_response(body: Any) -> GenerationResult:
    """A single `/generate` response -> GenerationResult (token ids, log-probs, finish reason)."""
    if not isinstance(body, dict) or not isinstance(body.get("meta_info"), dict):
        raise ProtocolError(
            f"a /generate response needs a meta_info object, got {str(body)[:200]!r}"
        )
    meta = body["meta_info"]
    entries = meta.get("output_token_logprobs")
    if entries is None:
        raise ProtocolError(
            "the /generate response has no meta_info.output_token_logprobs "
            "(was return_logprob sent?)"
        )
    logprobs = [float(e[0]) for e in entries]
    ids_from_logprobs = [int(e[1]) for e in entries]
    token_ids = body.get("output_ids")
    if token_ids is None:
        token_ids = ids_from_logprobs
    token_ids = [int(t) for t in token_ids]
    if token_ids != ids_from_logprobs:
        raise ProtocolError(
            f"output_ids ({len(token_ids)} tokens) disagree with the token ids in "
            f"output_token_logprobs ({len(ids_from_logprobs)})"
        )
    extra = {
        k: meta[k] for k in ("id", "prompt_tokens", "cached_tokens", "weight_version") if k in meta
    }
    return GenerationResult(
        token_ids=token_ids,
        logprobs=logprobs,
        finish_reason=_finish_type(meta.get("finish_reason")),
        meta=extra,
    )


def parse_generate_body(body: Any) -> list[tuple[list[int], SamplingParams, str]]:
    """Server side: a `/generate` body -> one (prompt ids, sampling, rid) per prompt.

    Accepts a single prompt (`input_ids: [int]`) or a batch (`input_ids: [[int], ...]`, with one
    sampling dict for all or a list of them).
    """
    if not isinstance(body, dict):
        raise ProtocolError("the /generate body must be a JSON object")
    if "text" in body and body.get("input_ids") is None:
        raise ProtocolError("this server takes token ids: send input_ids, not text")
    ids = body.get("input_ids")
    if not isinstance(ids, list) or not ids:
        raise ProtocolError(
            "input_ids must be a non-empty list of token ids (or a list of such lists)"
        )
    batch = ids if isinstance(ids[0], list) else [ids]
    params = body.get("sampling_params")
    params_list = params if isinstance(params, list) else [params] * len(batch)
    rids = body.get("rid")
    rid_list = rids if isinstance(rids, list) else [rids or ""] * len(batch)
    if len(params_list) != len(batch) or len(rid_list) != len(batch):
        raise ProtocolError("sampling_params and rid lists must be as long as the input_ids batch")
    if int(body.get("logprob_start_len", -1) or -1) >= 0:
        raise ProtocolError("prompt log-probs (logprob_start_len >= 0) are not served here")
    out = []
    for prompt, sp, rid in zip(batch, params_list, rid_list, strict=True):
        if not prompt or not all(isinstance(t, int) and t >= 0 for t in prompt):
            raise ProtocolError("every prompt must be a non-empty list of non-negative token ids")
        out.append((prompt, sampling_from_json(sp), rid or ""))
    return out


def generate_response(
    result: GenerationResult,
    prompt_len: int,
    rid: str,
    text: str = "",
    weight_version: str | None = None,
) -> dict[str, Any]:
    """Server side: a GenerationResult -> SGLang's `/generate` response object."""
    if result.finish_reason == "stop" and result.token_ids:
        finish: dict[str, Any] = {"type": "stop", "matched": result.token_ids[-1]}
    elif result.finish_reason == "length":
        finish = {"type": "length", "length": len(result.token_ids)}
    else:
        finish = {"type": result.finish_reason}
    meta: dict[str, Any] = {
        "id": rid,
        "finish_reason": finish,
        "prompt_tokens": prompt_len,
        "completion_tokens": len(result.token_ids),
        "cached_tokens": 0,
        "output_token_logprobs": [
            [lp, tok, None] for lp, tok in zip(result.logprobs, result.token_ids, strict=True)
        ],
    }
    if weight_version is not None:
        meta["weight_version"] = weight_version
    return {"text": text, "output_ids": list(result.token_ids), "meta_info": meta}
