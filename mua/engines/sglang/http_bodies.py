"""The bodies the SGLang client sends and reads, apart from the calls themselves.

`encode_body` is a call's JSON body (run on a worker thread for large pushes); `PromptJSON`
keeps each conversation's prompt ids as JSON text so a turn serializes only its new tail;
`read_body` / `server_message` / `check_success` read a server's answer (JSON, plain text, an
error message, a `{"success": false}` refusal); `routed_experts` reads a mixture of experts'
routing from a /generate answer's `meta_info`. Not here: HTTP sessions and the calls
(`mua.engines.sglang.sglang_engine`), the shapes of /generate (`mua.engines.sglang.protocol`).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from typing import Any

import numpy as np

from mua.errors import RunFailure
from mua.models.moe_layout import moe_layer_ids
from mua.models.moe_replay import compact

JSON_HEADERS = {"Content-Type": "application/json", "Accept": "application/json"}


def encode_body(body: Any) -> bytes:
    return json.dumps(body).encode()


class PromptJSON:
    """The JSON text of each conversation's prompt ids, extended turn by turn: a turn's prompt is
    the previous one plus what came since, so only that tail is serialized again."""

    KEEP = 4096  # conversations remembered (the oldest go first)

    def __init__(self) -> None:
        self._last: dict[str, tuple[list[int], str]] = {}

    def json_of(self, route_key: str, prompt_ids: Sequence[int], keep: bool = True) -> str:
        known = self._last.pop(route_key, None) if route_key else None
        if known is not None and prompt_ids[: len(known[0])] == known[0] and known[0]:
            ids, text = known
            tail = list(map(int, prompt_ids[len(ids) :]))
            if tail:
                ids = ids + tail
                text = text[:-1] + ", " + ", ".join(map(str, tail)) + "]"
        else:
            ids = list(map(int, prompt_ids))
            text = json.dumps(ids)
        if route_key and keep:
            self._last[route_key] = (ids, text)
            if len(self._last) > self.KEEP:
                del self._last[next(iter(self._last))]
        return text


def read_body(raw: bytes) -> Any:
    if not raw.strip():
        return {}
    try:
        return json.loads(raw)
    except json.JSONDecodeError:
        return {"text": raw.decode(errors="replace")}  # /flush_cache answers plain text


def server_message(raw: bytes) -> str:
    try:
        body = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return raw.decode(errors="replace")[:300]
    if isinstance(body, dict):
        err = body.get("error")
        if isinstance(err, dict):
            return str(err.get("message", err))[:300]
        return str(err or body.get("message") or body)[:300]
    return str(body)[:300]


def check_success(body: Any, base_url: str) -> None:
    if isinstance(body, dict) and body.get("success") is False:
        raise RunFailure(
            f"SGLang server {base_url} refused the request: {body.get('message', body)}"
        )


def routed_experts(meta: dict, fed_tokens: int, hf_config: Any) -> np.ndarray | None:
    """The record [tokens, MoE layers, top_k] (`mua.models.moe_replay.compact`) of an answer
    to a body with `return_routed_experts` (SGLang >= 0.5.23): `meta_info.routed_experts` is the
    base64 of an int32 array [fed_tokens, decoder layers, top_k] (the prompt and every sampled
    token but the last, every layer; dense layers' rows are dropped here). None when the answer
    has none (a server started without --enable-return-routed-experts); ValueError when its
    size does not fit `fed_tokens` and the model's layers and top_k."""
    data = meta.get("routed_experts")
    if not data:
        return None
    flat = np.frombuffer(base64.b64decode(data), dtype=np.int32)
    layers, top_k = int(hf_config.num_hidden_layers), int(hf_config.num_experts_per_tok)
    if flat.size != fed_tokens * layers * top_k:
        raise ValueError(
            f"meta_info.routed_experts holds {flat.size} expert ids, not {fed_tokens} tokens x "
            f"{layers} layers x top_k {top_k}"
        )
    routes = flat.reshape(fed_tokens, layers, top_k)[:, moe_layer_ids(hf_config)]
    return compact(routes)
