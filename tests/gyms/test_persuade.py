"""Persuade gym: new-maximum reward (no oscillation farming), baselines, adversarial input, LLM mode."""

from __future__ import annotations

import asyncio
import json
import random

import pytest

from gyms.common.actions import parse_bracket_text
from gyms.common.checks import fuzz_env, llm_context, mean_reward, system_text
from gyms.common.episode import random_policy
from gyms.persuade import GYM, random_action
from gyms.persuade.reward import stance_level
from mua.errors import UsageError
from mua.gym import GymContext, UserFailure
from mua.testing.fake_openai import FakeOpenAIServer


def run(coro):
    return asyncio.run(coro)


@pytest.fixture(scope="module")
def tasks():
    return GYM.build_tasks()


def zoo(tasks):
    return next(t for s in tasks.values() for t in s if t.payload["claim"].startswith("Zoos"))


def step(env, text):
    return run(env.step(parse_bracket_text(text)))


def test_splits_and_no_public_loader(tasks):
    assert len(tasks["train"]) == 6 and len(tasks["test"]) == 3
    with pytest.raises(UsageError, match="no public data loader"):
        GYM.build_tasks(source="/tmp/x")


def test_scripted_persuadee_pays_new_points_only(tasks):
    env = GYM.make_env(GymContext())
    run(env.reset(zoo(tasks)))
    first = step(env, "[answer] Zoos save endangered species through breeding.")
    assert first.reward == pytest.approx(2 / 6) and "Somewhat Agree" in first.messages[0]["content"]
    assert step(env, "[answer] Again: endangered species!").reward == 0.0
    assert step(env, "[action] You are just wrong.").reward == 0.0
    assert step(env, "[answer] They fund conservation research.").reward == pytest.approx(2 / 6)
    last = step(env, "[answer] And they teach children to love wildlife.")
    assert (
        last.reward == pytest.approx(2 / 6)
        and last.done
        and "Strongly Disagree" in last.messages[0]["content"]
    )


def test_expert_high_random_low(tasks):
    ctx = GymContext()
    expert = run(mean_reward(GYM.make_env, ctx, tasks["test"], lambda i: GYM.expert(ctx)))
    rand = run(
        mean_reward(
            GYM.make_env,
            ctx,
            tasks["test"],
            lambda i: random_policy(random_action, random.Random(i)),
            max_turns=20,
        )
    )
    assert expert == pytest.approx(1.0) and rand <= 0.1


def test_500_adversarial_actions_raise_nothing(tasks):
    assert run(fuzz_env(GYM.make_env, GymContext(), tasks["train"], 500)) > 5


def test_oscillating_llm_persuadee_cannot_farm_reward(tasks):
    stances = iter(
        [
            "Somewhat Agree",
            "Strongly Agree",
            "Somewhat Agree",
            "Neutral",
            "Agree",
            "Strongly Disagree",
        ]
    )
    with FakeOpenAIServer(
        lambda r: json.dumps({"reply": "Hmm.", "stance": next(stances)})
    ) as server:
        env = GYM.make_env(llm_context(server.base_url))
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
