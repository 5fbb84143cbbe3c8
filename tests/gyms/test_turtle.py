"""Turtle gym: scripted oracle and judge, improvement reward, baselines, adversarial input, LLM mode, public data."""

from __future__ import annotations

import asyncio
import json

import pytest

from gyms.common.actions import parse_bracket_text
from gyms.common.checks import last_user_text, llm_context, system_text
from gyms.turtle import GYM
from gyms.turtle.users import scripted_answer
from mua.errors import UsageError
from mua.gym import GymContext, UserFailure
from tests.fakes.fake_openai import FakeOpenAIServer


def run(coro):
    return asyncio.run(coro)


@pytest.fixture(scope="module")
def tasks():
    return GYM.build_tasks()


def by_title(tasks, title):
    return next(t for s in tasks.values() for t in s if t.payload["title"] == title)


def step(env, text):
    return run(env.step(parse_bracket_text(text)))


def test_splits_and_weights(tasks):
    assert len(tasks["train"]) == 6 and len(tasks["test"]) == 3
    for t in tasks["train"] + tasks["test"]:
        assert sum(c["weight"] for c in t.payload["criteria"]) == pytest.approx(1.0)


def test_scripted_oracle(tasks):
    story = by_title(tasks, "The Quiet Concert").payload
    assert scripted_answer("Was the audience deaf?", story) == "Yes"
    assert scripted_answer("Was the piano broken by a thief?", story) == "No"
    assert scripted_answer("?", story) == "Maybe"


def test_improvement_reward_capped_and_ends(tasks):
    env = GYM.make_env(GymContext())
    run(env.reset(by_title(tasks, "The Quiet Concert")))
    first = step(env, "[answer] The audience was deaf.")
    assert first.reward == pytest.approx(0.5) and not first.done
    assert step(env, "[answer] The audience was deaf.").reward == 0.0  # no pay for repeating
    assert (
        step(env, "[answer] Nothing to do with it.").reward == 0.0
    )  # worse answers never go negative
    second = step(env, "[answer] The audience was deaf and felt the vibrations.")
    assert second.reward == pytest.approx(0.3)
    last = step(
        env, "[answer] The deaf audience felt the vibrations; the pianist had lost her hearing."
    )
    assert (
        last.reward == pytest.approx(0.2)
        and last.done
        and last.components == {"story": pytest.approx(0.2)}
    )


def _host(request: dict) -> str:
    if "Score the player's explanation" in system_text(request):
        return json.dumps(
            {"scores": [1, 0.5, 0] if "deaf" in last_user_text(request) else [0, 0, 0]}
        )
    return json.dumps({"answer": "Yes"})


def test_llm_oracle_and_judge_over_http(tasks):
    with FakeOpenAIServer(_host, faults=["malformed"]) as server:
        env = GYM.make_env(llm_context(server.base_url))
        run(env.reset(by_title(tasks, "The Quiet Concert")))
        assert (
            step(env, "[action] Is music involved?").messages[0]["content"] == "Yes.\nReward: 0.0"
        )
        result = step(env, "[answer] They were deaf.")
        assert result.reward == pytest.approx(0.5 + 0.15)
        judged = server.requests[-1]["json"]
        assert "The audience was deaf." in system_text(judged) and "3 in all" in system_text(judged)


def test_llm_wrong_score_count_becomes_user_failure(tasks):
    with FakeOpenAIServer(lambda r: json.dumps({"scores": [1, 1]})) as server:
        env = GYM.make_env(llm_context(server.base_url, max_retries=1))
        run(env.reset(by_title(tasks, "The Quiet Concert")))
        with pytest.raises(UserFailure):
            step(env, "[answer] They were deaf.")
        assert server.total_requests == 2  # asked, re-asked, then gave up


def test_public_stories_load(shared_data):
    splits = GYM.build_tasks(source=shared_data / "userrl" / "gyms" / "TurtleGym")
    rows = splits["train"] + splits["test"]
    assert len(rows) == 471 and 20 < len(splits["test"]) < 90
    for t in rows:
        assert sum(c["weight"] for c in t.payload["criteria"]) == pytest.approx(1.0)
        assert all(c["keywords"] for c in t.payload["criteria"])


def test_bad_public_file(tmp_path):
    bad = tmp_path / "all_stories_refined.json"
    bad.write_text(
        json.dumps(
            {
                "1": {
                    "new_title": "t",
                    "new_surface": "s",
                    "new_bottom": "b",
                    "evaluation": [{"statement": "x"}],
                }
            }
        )
    )
    with pytest.raises(UsageError, match="story 1 evaluation item 0 needs"):
        GYM.build_tasks(source=bad)
