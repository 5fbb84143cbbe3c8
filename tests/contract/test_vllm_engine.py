"""mua's vllm engine against real vLLM servers on CPU, one per covered release (tests/.vllm).

Each release's server starts once for the module (LoRA enabled, eager) on a tiny Qwen3 folder with
tied embeddings, and is checked against the trainer's own float32 forward in mua's transformers:
- generation from token ids: greedy log-probs equal log_softmax(logits), and sampled ones at
  T = 0.7 equal log_softmax(logits / 0.7), both to 1e-4, for a stop-token finish and a length one;
- a full push of another model's weights: the log-probs then equal that model's (vLLM's own
  in-place reload leaves the tied CPU head stale and misses by up to 1), also on a prompt whose KV
  was cached before the push, and results report the pushed version; a push vLLM cannot take
  fails with one line and leaves the weights as they were;
- a LoRA adapter push: log-probs equal peft's forward of base + adapter;
- abort: a long request cancelled by `drain()` leaves the server idle and serving;
- its key: every route, the development ones included, refuses a request without it;
- `mua eval` and `mua rollout` with `rollout.engine: vllm` pointed at the server play every game.
"""

from __future__ import annotations

import asyncio
import json
import time
import urllib.error
import urllib.request

import pytest
import torch

from mua.engines.engine_contract import GenerationRequest, SamplingParams
from mua.engines.vllm.settings import VLLMConfig
from mua.errors import RunFailure
from tests.conftest import free_port
from tests.contract.vllm_side import RELEASES, side_python, tiny_folders

PROMPT = [(7 + 97 * i) % 1999 + 1 for i in range(16)]
LONG_PROMPT = [(11 + 53 * i) % 1999 + 1 for i in range(300)]  # fills cached KV blocks
TOL = 1e-4


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    return tiny_folders(tmp_path_factory)


@pytest.fixture(scope="module")
def servers(folders, tmp_path_factory):
    """release -> a started engine, started at the first test that asks (once per module)."""
    from mua.engines.vllm.vllm_launch import engine_from_config

    started: dict = {}
    logs = tmp_path_factory.mktemp("vllm-logs")

    def get(release: str):
        if isinstance(started.get(release), Exception):
            raise started[release]  # one start per release, even a failed one
        if release not in started:
            cfg = VLLMConfig(
                python=side_python(release),
                port=free_port(),
                kv_cache_gb=1,
                extra_args=["--max-model-len", "1024"],
            )
            try:
                started[release] = engine_from_config(
                    cfg, str(folders[0]), lora_rank=4, log_dir=str(logs)
                )
            except Exception as err:
                started[release] = err
                raise
        return started[release]

    yield get
    for engine in started.values():
        if not isinstance(engine, Exception):
            asyncio.run(engine.close())


@pytest.fixture(params=RELEASES)
def engine(request, servers, folders):
    """The release's engine holding the weights of folder 0."""
    eng = servers(request.param)
    if eng.weight_version != "base":
        asyncio.run(eng.push_full(_weights(folders[0]), "base"))
    return eng


def _weights(folder):
    from safetensors.torch import load_file

    return list(load_file(str(folder / "model.safetensors")).items())


def _trainer(folder):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32).eval()


def _logprobs(model, prompt, tokens, temperature=1.0):
    ids = torch.tensor([list(prompt) + list(tokens)])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0].float()
    start = len(prompt) - 1
    logp = torch.log_softmax(logits[start : start + len(tokens)] / temperature, dim=-1)
    return [logp[i, t].item() for i, t in enumerate(tokens)]


def _generate(engine, prompt, temperature=0.0, max_new=8, stop=(), seed=None):
    sampling = SamplingParams(
        temperature=temperature, max_new_tokens=max_new, stop_token_ids=list(stop), seed=seed
    )
    return asyncio.run(engine.generate(GenerationRequest(list(prompt), sampling)))


def _max_diff(a, b) -> float:
    assert len(a) == len(b) and a
    return max(abs(x - y) for x, y in zip(a, b))


def test_generation_logprobs_equal_the_trainer_forward(engine, folders):
    model = _trainer(folders[0])
    greedy = _generate(engine, PROMPT)
    assert greedy.finish_reason == "length" and len(greedy.token_ids) == 8
    assert _max_diff(greedy.logprobs, _logprobs(model, PROMPT, greedy.token_ids)) < TOL
    hot = _generate(engine, PROMPT, temperature=0.7, max_new=12, seed=3)
    assert _max_diff(hot.logprobs, _logprobs(model, PROMPT, hot.token_ids, 0.7)) < TOL
    # log-probs at T = 1 would differ: the temperature is in them
    assert _max_diff(hot.logprobs, _logprobs(model, PROMPT, hot.token_ids)) > 1e-3
    # a stop token ends the generation and is returned with its log-prob
    stop = greedy.token_ids[2]
    stopped = _generate(engine, PROMPT, stop=[stop])
    assert stopped.finish_reason == "stop" and stopped.token_ids[-1] == stop
    assert len(stopped.logprobs) == len(stopped.token_ids) <= 3


def test_full_push_is_exact_and_versioned(engine, folders):
    before = _generate(engine, LONG_PROMPT)  # caches the long prompt's KV
    asyncio.run(engine.push_full(_weights(folders[1]), "7"))
    other = _trainer(folders[1])
    for prompt in (PROMPT, LONG_PROMPT):
        after = _generate(engine, prompt)
        assert after.meta["weight_version"] == "7"
        assert _max_diff(after.logprobs, _logprobs(other, prompt, after.token_ids)) < TOL
    assert _generate(engine, LONG_PROMPT).logprobs != before.logprobs


def test_a_push_vllm_cannot_take_fails_in_one_line_and_keeps_the_weights(engine, folders, tmp_path):
    base = _generate(engine, PROMPT)
    with pytest.raises(RunFailure) as err:
        asyncio.run(engine.load_folder(str(tmp_path / "no-such-folder"), "8"))
    assert "\n" not in str(err.value) and "did not take the pushed weights" in str(err.value)
    again = _generate(engine, PROMPT)
    assert again.token_ids == base.token_ids and again.logprobs == base.logprobs
    assert again.meta["weight_version"] == "base"


def test_adapter_push_equals_peft(engine, folders, tol=TOL):
    from peft import LoraConfig, get_peft_model, get_peft_model_state_dict

    torch.manual_seed(0)
    targets = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    config = LoraConfig(r=4, lora_alpha=8, target_modules=targets, init_lora_weights=False)
    peft_model = get_peft_model(_trainer(folders[0]), config).eval()
    tensors = list(get_peft_model_state_dict(peft_model).items())
    as_dict = json.loads(json.dumps(peft_model.peft_config["default"].to_dict(), default=list))
    asyncio.run(engine.load_adapter("mua-lora-0", tensors, as_dict, "3"))
    try:
        out = _generate(engine, PROMPT)
        assert out.meta["lora_path"] == "mua-lora-0" and out.meta["weight_version"] == "3"
        diff = _max_diff(out.logprobs, _logprobs(peft_model, PROMPT, out.token_ids))
        assert diff < tol
        base = _logprobs(_trainer(folders[0]), PROMPT, out.token_ids)
        assert _max_diff(out.logprobs, base) > 1e-3  # the adapter changed the model
    finally:
        engine.adapters.live = None  # later tests generate with the base again


def test_drain_aborts_a_running_request(engine):
    async def cancel_one():
        sampling = SamplingParams(temperature=1.0, max_new_tokens=900, seed=1)
        task = asyncio.ensure_future(engine.generate(GenerationRequest(PROMPT, sampling)))
        while not engine._inflight:
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.5)
        aborted = await engine.drain()
        with pytest.raises(asyncio.CancelledError):
            await task
        return aborted

    assert asyncio.run(cancel_one()) == 1
    deadline = time.monotonic() + 20
    while _running(engine) > 0 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _running(engine) == 0
    assert _generate(engine, PROMPT).finish_reason == "length"


def _running(engine) -> float:
    request = urllib.request.Request(engine.base_url + "/metrics", headers=engine._headers)
    with urllib.request.urlopen(request, timeout=10) as resp:
        text = resp.read().decode()
    lines = [ln for ln in text.splitlines() if ln.startswith("vllm:num_requests_running")]
    return sum(float(ln.rsplit(" ", 1)[1]) for ln in lines)


def _status_without_key(url: str, body: bytes | None) -> int:
    request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as reply:
            return reply.status
    except urllib.error.HTTPError as err:
        return err.code


def test_the_server_refuses_every_request_without_its_key(engine):
    """The launched server's development routes, /v1 and /health answer 401 to a request
    without the key (mua's key guard); the client, which sends it, is served."""
    rpc = json.dumps({"method": "mua_load_weights", "args": ["/nowhere"]}).encode()
    for path, body in (
        ("/collective_rpc", rpc),
        ("/reset_prefix_cache", b""),
        ("/v1/models", None),
        ("/health", None),
    ):
        assert _status_without_key(engine.base_url + path, body) == 401, path
    assert asyncio.run(engine.version()) != "unknown"


@pytest.mark.parametrize("release", RELEASES[:1])
def test_mua_eval_and_rollout_run_on_the_server(
    release, servers, folders, tmp_path, mua_cli, monkeypatch
):
    """`mua eval` and `mua rollout` with `rollout.engine: vllm` pointed at the server (a keyed
    one, its key named by `api_key_env`): every game is played, and every assistant turn of a
    rollout carries the engine's log-probs."""
    engine = servers(release)
    asyncio.run(engine.push_full(_weights(folders[0]), "base"))
    monkeypatch.setenv("MUA_TEST_VLLM_KEY", engine._headers["Authorization"].split()[1])
    keyed = "rollout.vllm.api_key_env=MUA_TEST_VLLM_KEY"
    out = tmp_path / "eval"
    code, stdout, stderr = mua_cli(
        "eval",
        *("--gym", "guess", "--model", str(folders[0]), "-n", "2", "--max-tasks", "3"),
        *("--out", str(out), "--no-mlflow"),
        "rollout.engine=vllm",
        f"rollout.vllm.base_urls=[{engine.base_url}]",
        keyed,
    )
    assert code == 0, stderr[-2000:] + stdout[-2000:]
    assert len((out / "results.jsonl").read_text().splitlines()) == 6
    written = tmp_path / "rollouts.jsonl"
    code, stdout, stderr = mua_cli(
        "rollout",
        *("policy=model", f"model.path={folders[0]}", "gym.name=guess", "data.max_tasks=2"),
        *("rollout.n=2", "rollout.engine=vllm", f"rollout.vllm.base_urls=[{engine.base_url}]"),
        keyed,
        f"output={written}",
    )
    assert code == 0, stderr[-2000:] + stdout[-2000:]
    rows = [json.loads(line) for line in written.read_text().splitlines()]
    assert len(rows) == 4
    for row in rows:  # every sampled token has the engine's (negative) log-prob
        sampled = [lp for lp, m in zip(row["logprobs"], row["loss_mask"]) if m]
        assert sampled and all(lp < 0 for lp in sampled)
