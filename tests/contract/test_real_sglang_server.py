"""mua against SGLang's real HTTP server (FastAPI app, TokenizerManager, warm-up), per covered release.

One server per release for the module (real_server_harness.py; both start at once): the release's
own `launch_server` on CPU with the stand-in scheduler process (standin_scheduler.py), which runs
the warm model with transformers and the release's own weight-update and memory methods. Checked:

- readiness: /health answers 200 once the release's warm-up ran, and /get_model_info reports
  weight_version "default" before any push;
- every /generate field mua reads (output_ids, meta_info.output_token_logprobs,
  meta_info.finish_reason, meta_info.weight_version) is present in the release's answer, and
  mua's parser reads a length stop and a stop-token finish from it;
- two `mua train` steps with `rollout.engine: sglang` pointed at the server: rollouts, drain,
  release, resume, the push (decoded by the release's serializer, names and shapes checked by the
  stand-in, loaded into its model) and the probe, whose greedy log-probs the server computes from
  the pushed weights, so a push that did not arrive fails it; afterwards the server reports the
  weight_version the push carried;
- `mua eval` against the same server.
"""

from __future__ import annotations

import json
import subprocess
import urllib.error
import urllib.request

import pytest
import yaml

from mua.engines.engine_contract import GenerationRequest, SamplingParams
from mua.engines.sglang import protocol
from tests.conftest import installed_mua, user_env
from tests.contract.real_server_harness import SERVER_RELEASES, RealServer
from tests.integration.grpo_helpers import write_rl_recipe
from tests.integration.train_helpers import metric_history, run_train


@pytest.fixture(scope="module")
def servers(guess_setup, tmp_path_factory):
    """{version: RealServer}, every covered release started at once (the imports dominate)."""
    model, _, _ = guess_setup
    logs = tmp_path_factory.mktemp("real-sglang")
    started = {v: RealServer(v, model, logs / f"{v}.log") for v in SERVER_RELEASES}
    try:
        for server in started.values():
            print(f"SGLang {server.version} ready after {server.wait_ready():.0f} s")
        yield started
    finally:
        for server in started.values():
            server.stop()


def _get(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=60) as resp:
        return json.loads(resp.read())


def _generate(url: str, sampling: SamplingParams, rid: str) -> dict:
    body = protocol.generate_body(GenerationRequest([1, 5, 7, 9], sampling), rid=rid)
    req = urllib.request.Request(
        url + "/generate",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=120) as resp:
        return json.loads(resp.read())


@pytest.mark.parametrize("version", SERVER_RELEASES)
def test_real_server_answers_every_field_mua_reads(servers, version):
    url = servers[version].url
    assert _get(url + "/get_server_info")["version"] == version
    assert _get(url + "/get_model_info")["weight_version"] == "default"
    with urllib.request.urlopen(url + "/health", timeout=30) as resp:
        assert resp.status == 200
    greedy = _generate(url, SamplingParams(temperature=0.0, max_new_tokens=4), f"fields-{version}")
    assert {"output_ids", "meta_info"} <= set(greedy), greedy
    meta = greedy["meta_info"]
    assert {"output_token_logprobs", "finish_reason", "weight_version"} <= set(meta), meta
    assert (
        meta["finish_reason"]["type"] in ("length", "stop") and meta["weight_version"] == "default"
    )
    result = protocol.parse_generate_response(greedy)
    assert result.token_ids == greedy["output_ids"] and len(result.logprobs) == len(
        result.token_ids
    )
    assert (result.finish_reason == "length") == (len(result.token_ids) == 4), greedy
    assert all(lp < 0 for lp in result.logprobs)
    # the same prompt, stopped at its first greedy token: the release's stop-token finish
    first = result.token_ids[0]
    stopped = _generate(
        url,
        SamplingParams(temperature=0.0, max_new_tokens=4, stop_token_ids=[first]),
        f"stop-{version}",
    )
    parsed = protocol.parse_generate_response(stopped)
    assert parsed.finish_reason == "stop" and parsed.token_ids == [first], stopped
    assert parsed.logprobs[0] == pytest.approx(result.logprobs[0], abs=1e-6)


def _post(url: str, body: dict) -> tuple[int, dict]:
    req = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(req, timeout=120) as resp:
            return resp.status, json.loads(resp.read() or b"{}")
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read() or b"{}")


@pytest.fixture
def mua_serve(guess_setup, request):
    """`mua serve --sglang-release <version>` on the same model; yields its URL."""
    from tests.integration.train_helpers import mua_serve as serve_process

    model, _, _ = guess_setup
    with serve_process(model, "--sglang-release", request.param) as url:
        yield request.param, url


@pytest.mark.parametrize("mua_serve", SERVER_RELEASES, indirect=True)
def test_mua_serve_answers_as_the_real_server(servers, mua_serve):
    """The same requests to `mua serve` emulating a release and to that release's real server:
    the same greedy tokens and log-probs (same weights), the same meta_info keys mua reads, and the
    same status for a weight-update call outside a session (releases with sessions)."""
    version, fake = mua_serve
    real = servers[version].url
    body = protocol.generate_body(
        GenerationRequest([1, 5, 7, 9], SamplingParams(temperature=0.0, max_new_tokens=4))
    )
    answers = {}
    for name, url in (("real", real), ("mua", fake)):
        status, answer = _post(url + "/generate", {**body, "rid": f"parity-{name}-{version}"})
        assert status == 200, (name, answer)
        answers[name] = answer
    # both hold the warm model's weights (this runs before the train step pushes to the server)
    real_result = protocol.parse_generate_response(answers["real"])
    mua_result = protocol.parse_generate_response(answers["mua"])
    assert real_result.token_ids == mua_result.token_ids, answers
    assert real_result.finish_reason == mua_result.finish_reason, answers
    for a, b in zip(real_result.logprobs, mua_result.logprobs, strict=True):
        assert a == pytest.approx(b, abs=1e-4), answers
    keys = ("output_token_logprobs", "finish_reason", "weight_version", "prompt_tokens")
    for key in keys:
        assert (key in answers["real"]["meta_info"]) == (key in answers["mua"]["meta_info"]), key
    assert set(answers["real"]) >= {"output_ids", "meta_info"} <= set(answers["mua"])
    if version == "0.5.23":
        for route in ("/end_weight_update", "/update_weights_from_tensor"):
            payload = {} if route == "/end_weight_update" else {"serialized_named_tensors": []}
            real_status, real_body = _post(real + route, payload)
            mua_status, mua_body = _post(fake + route, payload)
            assert (real_status, real_body.get("success")) == (
                mua_status,
                mua_body.get("success"),
            ), (
                route,
                real_body,
                mua_body,
            )


@pytest.mark.parametrize("version", SERVER_RELEASES)
def test_train_step_against_the_real_server(servers, guess_setup, tmp_path, version):
    server = servers[version]
    model, train, _ = guess_setup
    # two steps: the second push follows a memory release (the stand-in's weights are NaN until
    # a push loads them) and carries weights the first step changed, so the probe can tell
    recipe = write_rl_recipe(
        tmp_path, model, train, None, total_steps=2, rollout={"engine": "sglang"}
    )
    res = run_train(recipe, f"rollout.sglang.base_urls=[{server.url}]", timeout_s=600)
    assert res.returncode == 0, res.stderr[-3000:] + server.tail()
    run = tmp_path / "run"
    probe = metric_history(run, "engine/probe_logp_diff")
    assert len(probe) == 2 and max(probe) < 1e-4, probe
    assert max(metric_history(run, "logp_diff_engine_vs_trainer")) < 1e-4
    # the push carried a version and the release's tokenizer manager adopted it
    assert _get(server.url + "/get_model_info")["weight_version"] != "default"
    assert "no handler" not in server.tail(200_000), server.tail()


@pytest.mark.parametrize("version", SERVER_RELEASES)
def test_eval_against_the_real_server(servers, guess_setup, tmp_path, version):
    server = servers[version]
    model, _, test = guess_setup
    recipe = tmp_path / "eval.yaml"
    recipe.write_text(
        yaml.safe_dump(
            {
                "model": {"path": str(model), "tool_parser": "bracket"},
                "gym": {"name": "guess"},
                "data": {"test_files": [str(test)]},
                "rollout": {"engine": "sglang", "max_new_tokens_per_turn": 8, "max_turns": 2},
                "eval": {"max_tasks": 4},
            }
        )
    )
    args = [str(recipe), f"rollout.sglang.base_urls=[{server.url}]", "--out", "ev"]
    res = subprocess.run(
        [installed_mua(), "eval", *args, "--fresh", "--no-mlflow"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=user_env(),
        timeout=600,
    )
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-3000:] + server.tail()
    summary = json.loads((tmp_path / "ev" / "summary.json").read_text())
    rows = (tmp_path / "ev" / "results.jsonl").read_text().splitlines()
    assert len(rows) >= 4, summary
