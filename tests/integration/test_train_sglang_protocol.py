"""GRPO through `mua train` with `rollout.engine=sglang` against `mua serve` (SGLang's protocol on CPU).

The same recipe runs with the in-process `hf` engine and with the sglang client talking to one
`mua serve` process for the same model: 1 rank, and 2 ranks sharing the one server. The server
(emulating SGLang 0.5.23, which refuses what that release refuses) reports it honours seeds, so
the client sends them, the runs draw the same rollouts and their losses agree. The weight and
memory calls it received are checked against that release's rules.
A server that acknowledges weight pushes without loading them is caught by the probe.
"""

from __future__ import annotations

import json
import urllib.request

import pytest

from tests.integration.grpo_helpers import write_rl_recipe
from tests.integration.train_helpers import REPO, metric_history, mua_serve, run_train

pytestmark = pytest.mark.integration

KEYS = ("loss", "reward/mean", "grad_norm", "val/reward_mean")
STEPS = 2
# Every use of the engine pushes once (1 bucket: the tiny model is far below the bucket size):
# before each step's rollouts, and before the validation at the last step.
PUSHES_PER_RUN = STEPS + 1


def _server_info(url: str) -> dict:
    with urllib.request.urlopen(url + "/get_server_info", timeout=30) as resp:
        return json.loads(resp.read())


@pytest.fixture(scope="module")
def served(guess_setup):
    """`mua serve` for the warm model on a free port; yields its URL."""
    model, _, _ = guess_setup
    with mua_serve(model) as url:
        yield url


def _recipe(folder, guess_setup, **extra):
    model, train, test = guess_setup
    return write_rl_recipe(
        folder, model, train, test, eval={"test_freq": STEPS}, total_steps=STEPS, **extra
    )


@pytest.fixture(scope="module")
def hf_run(guess_setup, tmp_path_factory):
    folder = tmp_path_factory.mktemp("hf")
    res = run_train(_recipe(folder, guess_setup))
    assert res.returncode == 0, res.stderr[-3000:]
    return folder / "run"


@pytest.mark.parametrize("nproc", [1, 2])
def test_sglang_protocol_run_matches_hf(guess_setup, served, hf_run, tmp_path, nproc):
    before = _server_info(served)["counts"]["weight_requests"]
    log_before = _server_info(served)["call_log"]
    recipe = _recipe(tmp_path, guess_setup, rollout={"engine": "sglang"})
    res = run_train(recipe, f"rollout.sglang.base_urls=[{served}]", "--nproc-per-node", str(nproc))
    assert res.returncode == 0, res.stderr[-3000:]
    run = tmp_path / "run"
    # one push per use of the engine, from the leader only (2 ranks share the server)
    assert _server_info(served)["counts"]["weight_requests"] - before == PUSHES_PER_RUN
    probe = metric_history(run, "engine/probe_logp_diff")
    assert len(probe) == STEPS and max(probe) < 1e-4
    assert len(metric_history(run, "time/weight_push_s")) == STEPS
    # the calls a real SGLang 0.5.23 would get: no resume of a tag that is not released, every
    # release frees all of its tags, pushes inside begin/end sessions, the server left resumed
    calls = _server_info(served)["call_log"][len(log_before) :]
    released: set[str] = set()
    in_session = False
    for call in calls:
        name, tags = call["call"], set(call.get("tags") or ())
        if name == "release_memory_occupation":
            assert tags == {"weights", "kv_cache", "cuda_graph"}, calls
            released |= tags
        elif name == "resume_memory_occupation":
            assert tags and tags <= released, calls
            released -= tags
        elif name in ("begin_weight_update", "end_weight_update"):
            assert in_session == (name == "end_weight_update"), calls
            in_session = not in_session
        elif name == "update_weights_from_tensor":
            assert in_session and "weights" not in released, calls
    assert not released and not in_session
    assert max(metric_history(run, "logp_diff_engine_vs_trainer")) < 1e-4
    for key in KEYS:
        ref, got = metric_history(hf_run, key), metric_history(run, key)
        assert len(ref) == len(got) > 0, key
        # 1 rank: the same numbers; 2 ranks: summation order differs (as for the hf engine)
        worst = max(abs(a - b) for a, b in zip(ref, got, strict=True))
        assert worst < 1e-5, (key, ref, got)


class _IgnoresPushes:
    """An engine that acknowledges weight pushes and keeps its own (different) weights."""

    def __init__(self, engine):
        self.inner = engine

    async def generate(self, request):
        return await self.inner.generate(request)

    async def update_weights(self, named_tensors) -> None:
        return None

    async def sleep(self) -> None:
        await self.inner.sleep()

    async def wake(self) -> None:
        await self.inner.wake()

    async def close(self) -> None:
        await self.inner.close()


def test_stale_server_stops_the_run_with_the_probe_error(guess_setup, tmp_path):
    from mua.engines.hf.hf_engine import HFEngine
    from mua.serve import MuaServer

    # a freshly initialised tiny model: not the warm start the trainer begins from
    engine = _IgnoresPushes(HFEngine.from_pretrained("tiny:qwen2-1m", seed=0))
    with MuaServer(engine, model_path="tiny:qwen2-1m") as server:
        recipe = _recipe(tmp_path, guess_setup, rollout={"engine": "sglang"})
        res = run_train(recipe, f"rollout.sglang.base_urls=[{server.url}]", "total_steps=1")
        assert server.counts["weight_requests"] == 1  # acknowledged, not loaded
    assert res.returncode == 1
    errors = [line for line in res.stderr.splitlines() if line.startswith("error: weight sync")]
    assert len(errors) == 1 and "probe_tolerance" in errors[0], res.stderr[-3000:]
    assert 'File "' + str(REPO / "mua") not in res.stderr  # no traceback from mua's own code
    assert not metric_history(tmp_path / "run", "loss")  # stopped before any update
