"""Persuade gym: both reward rules, baselines, adversarial input, LLM mode, UserRL's public claims."""

from __future__ import annotations

import asyncio
import json

import pytest

from gyms.common.actions import parse_bracket_text
from gyms.common.checks import llm_context, system_text
from gyms.persuade import GYM
from gyms.persuade.reward import stance_level
from mua.errors import UsageError
from mua.gym import GymContext, UserFailure
from tests.fakes.fake_openai import FakeOpenAIServer


def run(coro):
    return asyncio.run(coro)


@pytest.fixture(scope="module")
def tasks():
    return GYM.build_tasks()


def zoo(tasks):
    return next(t for s in tasks.values() for t in s if t.payload["claim"].startswith("Zoos"))


def step(env, text):
    return run(env.step(parse_bracket_text(text)))


def test_splits_and_a_source_without_the_claims(tasks, tmp_path):
    assert len(tasks["train"]) == 6 and len(tasks["test"]) == 3
    with pytest.raises(UsageError, match="no persuasion_multiturn folder found"):
        GYM.build_tasks(source=tmp_path)


def test_scripted_persuadee_pays_new_points_only(tasks):
    env = GYM.make_env(GymContext())
    run(env.reset(zoo(tasks)))
    first = step(env, "[answer] Zoos save endangered species through breeding.")
    assert first.reward == pytest.approx(2 / 6, abs=1e-6)
    assert "Partly Agree" in first.messages[0]["content"]
    assert step(env, "[answer] Again: endangered species!").reward == 0.0
    assert step(env, "[action] You are just wrong.").reward == 0.0
    assert step(env, "[answer] They fund conservation research.").reward == pytest.approx(
        2 / 6, abs=1e-6
    )
    last = step(env, "[answer] And they teach children to love wildlife.")
    assert (
        last.reward == pytest.approx(2 / 6, abs=1e-6)
        and last.done
        and "Strongly Disagree" in last.messages[0]["content"]
    )


OSCILLATING = [
    "Somewhat Agree",  # the older label for Partly Agree is still read
    "Strongly Agree",
    "Partly Agree",
    "Neutral",
    "Agree",
    "Strongly Disagree",
]


def test_oscillating_llm_persuadee_cannot_farm_reward_under_mua_rules(tasks):
    stances = iter(OSCILLATING)
    with FakeOpenAIServer(
        lambda r: json.dumps({"reply": "Hmm.", "stance": next(stances)})
    ) as server:
        env = GYM.make_env(llm_context(server.base_url, rules="mua"))
        run(env.reset(zoo(tasks)))
        rewards = [step(env, f"[answer] argument {i}").reward for i in range(6)]
        assert rewards == pytest.approx([2 / 6, 0, 0, 1 / 6, 0, 3 / 6])
        assert sum(rewards) == pytest.approx(1.0)
        assert "Zoos should be abolished." in system_text(server.requests[0]["json"])
        assert "argument 0" in system_text(server.requests[1]["json"])  # history is passed on


def test_llm_unknown_stance_becomes_user_failure(tasks):
    with FakeOpenAIServer(
        lambda r: json.dumps({"reply": "ok", "stance": "Kind of agree"})
    ) as server:
        env = GYM.make_env(llm_context(server.base_url, max_retries=1))
        run(env.reset(zoo(tasks)))
        with pytest.raises(UserFailure):
            step(env, "[answer] hi")


def test_stance_labels():
    assert stance_level("strongly_disagree") == 6 and stance_level(" Neutral ") == 3
    with pytest.raises(ValueError):
        stance_level("meh")


def test_upstream_pays_every_forward_move_and_shows_the_initial_argument(tasks):
    stances = iter(OSCILLATING)
    task = zoo(tasks)
    task.payload["argument"] = "Zoos keep animals in cages far too small for them."
    with FakeOpenAIServer(
        lambda r: json.dumps({"reply": "Hmm.", "stance": next(stances)})
    ) as server:
        env = GYM.make_env(llm_context(server.base_url))
        run(env.reset(task))
        results = [step(env, f"[answer] argument {i}") for i in range(6)]
    rewards = [r.reward for r in results]
    assert rewards == pytest.approx([2 / 6, 0, 2 / 6, 1 / 6, 0, 5 / 6], abs=1e-6)
    assert results[-1].done
    # the agent sees the reply and its reward, not the stance (UserRL's observation)
    assert results[0].messages[0]["content"] == "Hmm.\nReward: 0.333333"
    first, second = (system_text(r["json"]) for r in server.requests[:2])
    assert "Zoos keep animals in cages far too small for them." in first
    assert "Your previous stance: Strongly Agree." in first
    assert "Your previous stance: Partly Agree." in second


def test_public_claims_keep_userrl_split(shared_data):
    splits = GYM.build_tasks(source=shared_data / "userrl")
    assert len(splits["train"]) == 378 and len(splits["test"]) == 42
    task = splits["test"][0]
    assert task.source == "userrl" and task.payload["argument"] and task.payload["points"] == []
    again = GYM.build_tasks(source=shared_data / "userrl" / "data" / "persuasion_multiturn")
    assert [t.task_id for t in again["test"]] == [t.task_id for t in splits["test"]]
