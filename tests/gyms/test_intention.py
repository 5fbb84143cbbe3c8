"""Intention gym: per-question reward, no leak of missing details, baselines, adversarial input, LLM mode, public data."""

from __future__ import annotations

import asyncio
import json

import pytest

from gyms.common.actions import parse_bracket_text
from gyms.common.checks import last_user_text, llm_context, system_text
from gyms.intention import GYM
from gyms.intention.reward import IMPORTANCE_REWARD, question_reward
from mua.errors import UsageError
from mua.gym import GymContext, UserFailure
from tests.fakes.fake_openai import FakeOpenAIServer


def run(coro):
    return asyncio.run(coro)


@pytest.fixture(scope="module")
def tasks():
    return GYM.build_tasks()


def hotel(tasks):
    return next(t for t in tasks["train"] if t.payload["task"].startswith("Book me a hotel"))


def step(env, text):
    return run(env.step(parse_bracket_text(text)))


def test_question_reward_rule():
    assert (
        question_reward([3]) == 1.0 and question_reward([2]) == 0.7 and question_reward([1]) == 0.4
    )
    assert question_reward([3, 1]) == pytest.approx(0.8)
    assert question_reward([1, 1, 1]) == pytest.approx(0.0)
    assert question_reward([2, 1, 1, 1, 1]) == 0.0 and question_reward([]) == 0.0


def test_episode_rewards_and_end(tasks):
    env = GYM.make_env(GymContext())
    run(env.reset(hotel(tasks)))
    city = step(env, "[action] Which city are you going to?")
    assert city.reward == 1.0 and "Destination city" in city.messages[0]["content"]
    assert step(env, "[action] And the city again?").reward == 0.0  # already covered
    both = step(env, "[action] What budget, and how many guests?")
    assert (
        both.reward == pytest.approx(0.5) and not both.done
    )  # 0.7 for budget, -0.2 for the extra detail
    last = step(env, "[action] What dates?")
    assert last.reward == 1.0 and last.done


def test_user_never_sees_missing_details(tasks):
    env = GYM.make_env(GymContext())
    run(env.reset(hotel(tasks)))
    vague = step(env, "[action] Tell me more about what you want.")
    assert vague.reward == 0.0
    text = vague.messages[0]["content"]
    for d in hotel(tasks).payload["missing_details"]:
        assert d["answer"] not in text and d["description"] not in text
    for m in hotel(tasks).prompt:
        assert "Budget per night" not in m["content"]


def test_test_split_ceiling_is_the_expert_score_in_test_contract(tasks):
    """The ceiling (every missing detail asked) is the expert score `test_contract.py` expects."""
    best = sum(
        sum(IMPORTANCE_REWARD[d["importance"]] for d in t.payload["missing_details"])
        for t in tasks["test"]
    ) / len(tasks["test"])
    assert best == pytest.approx(2.8)


def _host(request: dict) -> str:
    system = system_text(request)
    if "These details are missing" in system:
        return json.dumps({"covered": [0] if "city" in last_user_text(request) else []})
    return json.dumps(
        {
            "reply": "Lisbon, probably."
            if "Lisbon" in system or "Tokyo" in system or "Chicago" in system
            else "No idea."
        }
    )


def test_llm_judge_and_user_over_http(tasks):
    task = hotel(tasks)
    with FakeOpenAIServer(_host, faults=[None, "malformed"]) as server:
        env = GYM.make_env(llm_context(server.base_url))
        run(env.reset(task))
        result = step(env, "[action] Which city?")
        assert result.reward == 1.0
        assert result.messages[0]["content"] == "Lisbon, probably.\nReward: 1.0"
        user_prompts = [
            system_text(r["json"])
            for r in server.requests
            if "You are a user" in system_text(r["json"])
        ]
        assert user_prompts and all(
            "Budget per night" not in p and "Travel dates" not in p for p in user_prompts
        )
        assert step(env, "[action] Anything else?").reward == 0.0


def test_llm_bad_indices_become_user_failure(tasks):
    with FakeOpenAIServer(lambda r: json.dumps({"covered": [99]})) as server:
        env = GYM.make_env(llm_context(server.base_url, max_retries=1))
        run(env.reset(hotel(tasks)))
        with pytest.raises(UserFailure):
            step(env, "[action] Which city?")


def test_public_intentions_load(shared_data):
    # the JSON files alone: all of them, in their own train/test files
    splits = GYM.build_tasks(source=shared_data / "userrl" / "gyms" / "IntentionGym")
    assert len(splits["train"]) == 1012 and len(splits["test"]) == 95
    assert all(d["keywords"] for t in splits["test"] for d in t.payload["missing_details"])


def test_bad_public_file(tmp_path):
    bad = tmp_path / "all_intentions_train.json"
    bad.write_text(
        json.dumps(
            [
                {
                    "id": "x",
                    "category": "c",
                    "task": "t",
                    "missing_details": [{"description": "d", "importance": "5", "inquiry": "q"}],
                }
            ]
        )
    )
    with pytest.raises(UsageError, match="importance 5 is not 1, 2 or 3"):
        GYM.build_tasks(source=tmp_path)
