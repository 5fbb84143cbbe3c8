"""A mixture of experts' routed experts from SGLang, checked by SGLang's own code per release.

For each covered release (see test_sglang_contract.py for how the probe runs SGLang code on CPU):
- the /generate body mua sends with `return_routed_experts` is taken by GenerateReqInput exactly
  where mua's table says the release has the field (0.5.23), refused by the others; the launch
  flag `--enable-return-routed-experts` parses exactly there too;
- where the release has the field: a request's experts written by its capture buffer, taken by
  its get_topk and encoded by its detokenizer read back through mua's decoder as the exact
  uint8 record [tokens, MoE layers, top_k] (dense layers dropped), and the SGLang client sends the
  field and reads the record from a real HTTP server answering with that string;
- where it has not: `algo.routing_replay=r3` is refused in one line before launch.
"""

from __future__ import annotations

import asyncio
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace

import numpy as np
import pytest

from mua.engines.engine_contract import GenerationRequest, SamplingParams
from mua.engines.sglang import colocated, http_bodies, protocol
from mua.engines.sglang.releases import COVERED_RELEASES, ReleaseTraits
from mua.errors import UsageError
from tests.contract.test_sglang_contract import _run_probe, _side_folder

FLAG = "--enable-return-routed-experts"
PROMPT, OUTPUT = [5, 6, 7, 8], [9, 10, 11]


def _config(**extra):
    """A Qwen3-MoE-like config: 4 decoder layers, top-2 of 8 experts."""
    return SimpleNamespace(num_hidden_layers=4, num_experts_per_tok=2, num_experts=8, **extra)


def _routes() -> np.ndarray:
    """Experts of the 6 fed tokens (prompt + output but the last) in 4 layers, top 2."""
    rng = np.random.default_rng(7)
    return np.stack([rng.permutation(8)[:2] for _ in range(6 * 4)]).reshape(6, 4, 2)


def _body() -> dict:
    request = GenerationRequest(
        prompt_ids=PROMPT, sampling=SamplingParams(temperature=1.0, max_new_tokens=3)
    )
    return protocol.generate_body(request, rid="traj-1-a-0", routed_experts=True)


def _launch_argv() -> list[str]:
    from mua.engines.sglang.sglang_launch import launch_command

    cmd = launch_command(
        "/models/policy", port=31234, mem_fraction=0.45, tp_size=1, extra_args=[FLAG]
    )
    return cmd[3:]


class _Server:
    """A real HTTP server on 127.0.0.1 answering /generate with `meta_info.routed_experts`."""

    def __init__(self, version: str, encoded: str):
        bodies = self.bodies = []

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _answer(self, obj):
                raw = json.dumps(obj).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def do_GET(self):
                self._answer({"version": version})

            def do_POST(self):
                bodies.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
                meta = {
                    "finish_reason": {"type": "length", "length": 3},
                    "output_token_logprobs": [[-0.5, t, None] for t in OUTPUT],
                    "routed_experts": encoded,
                }
                self._answer({"output_ids": OUTPUT, "meta_info": meta})

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.http.server_address[1]}"
        threading.Thread(target=self.http.serve_forever, daemon=True).start()


def _generate_through_client(version: str, encoded: str, config):
    from mua.engines.sglang.sglang_engine import SGLangEngine

    server = _Server(version, encoded)
    engine = SGLangEngine(server.url, hf_config=config, routed_experts=True)
    request = GenerationRequest(
        prompt_ids=PROMPT, sampling=SamplingParams(temperature=1.0, max_new_tokens=3)
    )

    async def run():
        try:
            return await engine.generate(request)
        finally:
            await engine.close_connections()

    try:
        return asyncio.run(run()), server.bodies
    finally:
        server.http.shutdown()


@pytest.mark.parametrize("version", COVERED_RELEASES)
def test_sglang_routed_experts_request_and_record(version, tmp_path, monkeypatch):
    folder = _side_folder(version)
    traits = ReleaseTraits.of(version)
    routes = _routes()
    checks = [
        {"kind": "generate", "bodies": [_body()], "vocab_size": 1000},
        {"kind": "server_args", "argv": _launch_argv(), "keys": ["enable_return_routed_experts"]},
    ]
    if traits.routed_experts:
        checks.append({"kind": "routed_experts", "routes": routes.tolist()})
    out = _run_probe(folder, {"checks": checks}, tmp_path)
    assert out["version"] == version
    generated, launch, *encoded = out["results"]

    if not traits.routed_experts:
        (result,) = generated["results"]
        assert not result["ok"] and "return_routed_experts" in result["error"], result
        assert not launch["ok"] and FLAG in launch["error"], launch
        recipe = SimpleNamespace(
            algo=SimpleNamespace(routing_replay="r3"),
            rollout=SimpleNamespace(sglang=SimpleNamespace(base_urls=[])),
        )
        monkeypatch.setattr(colocated, "sglang_version", lambda: version)
        with pytest.raises(UsageError, match=f"needs SGLang >= 0.5.23.*runs {version}") as err:
            colocated._check_routed_experts(recipe)
        assert "\n" not in str(err.value)
        recipe.algo.routing_replay = "off"
        colocated._check_routed_experts(recipe)  # no replay: nothing to refuse
        return

    assert generated["results"] == [{"ok": True}], generated
    assert launch == {"ok": True, "args": {"enable_return_routed_experts": True}}, launch
    (record,) = encoded
    assert record["ok"] and record["host_dtype_int32"], record
    assert record["read_back"] == routes.reshape(-1).tolist()  # SGLang's own reader agrees

    meta = {"routed_experts": record["encoded"]}
    got = http_bodies.routed_experts(meta, 6, _config())
    assert got.dtype == np.uint8 and got.shape == (6, 4, 2)
    np.testing.assert_array_equal(got, routes)
    # a model with dense layers: SGLang reports every decoder layer, the record keeps MoE layers
    sparse = http_bodies.routed_experts(meta, 6, _config(mlp_only_layers=[1]))
    np.testing.assert_array_equal(sparse, routes[:, [0, 2, 3]])
    with pytest.raises(ValueError, match="not 5 tokens x 4 layers x top_k 2"):
        http_bodies.routed_experts(meta, 5, _config())
    assert http_bodies.routed_experts({}, 6, _config()) is None

    result, sent = _generate_through_client(version, record["encoded"], _config())
    assert sent[0]["return_routed_experts"] is True and "routed_experts_start_len" not in sent[0]
    assert result.token_ids == OUTPUT
    np.testing.assert_array_equal(result.meta["routed_experts"], routes)
