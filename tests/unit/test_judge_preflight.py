"""A gym's own LLM endpoints (tau2's judge) are checked before a run, like the simulated user."""

import pytest

from mua.config import parse_recipe_dict
from mua.errors import RunFailure
from mua.run.preflight import ask_endpoints
from mua.run.spec import run_spec
from tests.fakes.fake_openai import FakeOpenAIServer, Fault


def _recipe(tmp_path, base_url):
    judge = {"base_url": base_url, "model": "judge-model", "api_key_env": "MUA_TEST_JUDGE_KEY"}
    return parse_recipe_dict(
        {
            "model": {"path": "tiny:qwen3-30m"},
            "user": {"kind": "scripted"},
            "gyms": [{"name": "tau2", "options": {"data_dir": str(tmp_path), "judge": judge}}],
        },
        "eval",
    )


def test_a_judge_refusing_its_key_stops_the_run_naming_the_judge(tmp_path, monkeypatch):
    monkeypatch.setenv("MUA_TEST_JUDGE_KEY", "wrong")
    with FakeOpenAIServer(
        faults=lambda i, body: Fault("status", status=401, message="bad key")
    ) as srv:
        recipe = _recipe(tmp_path, srv.base_url)
        with pytest.raises(RunFailure, match=r"^tau2 judge \(gym\.options\.judge\) at .*401"):
            ask_endpoints(run_spec(recipe, e) for e in recipe.gyms)
        assert srv.total_requests >= 1  # the judge itself was asked, not only the (scripted) user


def test_a_judge_that_answers_passes(tmp_path, monkeypatch):
    monkeypatch.setenv("MUA_TEST_JUDGE_KEY", "right")
    with FakeOpenAIServer() as srv:
        recipe = _recipe(tmp_path, srv.base_url)
        ask_endpoints(run_spec(recipe, e) for e in recipe.gyms)
        assert srv.total_requests == 1
