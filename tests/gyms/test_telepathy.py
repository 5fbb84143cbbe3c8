"""Telepathy gym: scripted oracle and judge, rewards, baselines, adversarial input, LLM mode, public data."""

from __future__ import annotations

import asyncio
import json

import pytest

from gyms.common.actions import parse_bracket_text
from gyms.common.checks import last_user_text, llm_context, system_text
from gyms.telepathy import GYM
from gyms.telepathy.users import scripted_answer
from mua.errors import UsageError
from mua.gym import GymContext, UserFailure
from tests.fakes.fake_openai import FakeOpenAIServer


def run(coro):
    return asyncio.run(coro)


@pytest.fixture(scope="module")
def tasks():
    return GYM.build_tasks()


def by_name(tasks, name):
    return next(t for s in tasks.values() for t in s if t.payload["name"] == name)


def step(env, text):
    return run(env.step(parse_bracket_text(text)))


def test_splits_fixed(tasks):
    assert len(tasks["train"]) == 22 and len(tasks["test"]) == 11
    assert [t.task_id for t in GYM.build_tasks()["test"]] == [t.task_id for t in tasks["test"]]


def test_scripted_oracle_answers_from_attributes(tasks):
    penguin = by_name(tasks, "Penguin").payload
    assert scripted_answer("Is it an animal?", penguin) == "Yes"
    assert scripted_answer("Can it fly?", penguin) == "No"
    assert scripted_answer("Does it live in water?", penguin) == "Yes"
    assert scripted_answer("Is it a person?", penguin) == "No"
    assert scripted_answer("Is it a penguin?", penguin) == "Yes"
    assert scripted_answer("Is it an Eagle?", penguin) == "No"
    assert scripted_answer("Hmm?", penguin) == "Maybe"
    assert scripted_answer("Is it man made?", by_name(tasks, "Bicycle").payload) == "Yes"


def test_guess_reward_paid_once_and_ends(tasks):
    env = GYM.make_env(GymContext())
    run(env.reset(by_name(tasks, "Mars")))
    assert step(env, "[action] Is it a planet?").messages[0]["content"].startswith("Yes")
    wrong = step(env, "[answer] Venus")
    assert wrong.reward == 0.0 and not wrong.done
    right = step(env, "[answer] It is the planet Mars")
    assert right.reward == 1.0 and right.done and right.components == {"guess": 1.0}
    assert step(env, "[answer] Mars").reward == 0.0


def test_question_limit_and_bad_choice(tasks):
    env = GYM.make_env(GymContext(options={"max_questions": 2}))
    run(env.reset(by_name(tasks, "Cat")))
    step(env, "[action] Is it an animal?")
    step(env, "[action] Is it a pet?")
    assert "used all 2 questions" in step(env, "[action] Is it small?").messages[0]["content"]
    bad = step(env, "[search] cats")
    assert "not available" in bad.messages[0]["content"] and bad.info["errors"]["bad_choice"] == 1


def _host(request: dict) -> str:
    system, user = system_text(request), last_user_text(request)
    if "judge a guessing game" in system:
        return json.dumps({"correct": "mars" in user.lower()})
    return json.dumps({"answer": "Yes" if "planet" in user else "No"})


def test_llm_oracle_and_judge_over_http(tasks):
    with FakeOpenAIServer(_host, faults=[None, "malformed"]) as server:
        ctx = llm_context(server.base_url)
        env = GYM.make_env(ctx)
        run(env.reset(by_name(tasks, "Mars")))
        assert step(env, "[action] Is it a planet?").messages[0]["content"].startswith("Yes")
        assert (
            step(env, "[action] Is it alive?").messages[0]["content"].startswith("No")
        )  # retried after bad JSON
        assert step(env, "[answer] Venus").reward == 0.0
        assert step(env, "[answer] Mars").reward == 1.0
        assert "hidden entity is: Mars" in system_text(server.requests[0]["json"])


def test_llm_invalid_json_becomes_user_failure(tasks):
    with FakeOpenAIServer(lambda r: json.dumps({"answer": "Probably"})) as server:
        env = GYM.make_env(llm_context(server.base_url, max_retries=1))
        run(env.reset(by_name(tasks, "Mars")))
        with pytest.raises(UserFailure):
            step(env, "[action] Is it a planet?")
        with pytest.raises(UserFailure):
            run(env.step(parse_bracket_text("[answer] Mars")))


def test_llm_mode_without_client_is_usage_error():
    with pytest.raises(UsageError, match="no LLM client"):
        GYM.make_env(GymContext(user_kind="llm"))


def test_public_entities_load(shared_data):
    splits = GYM.build_tasks(source=shared_data / "userrl")
    rows = splits["train"] + splits["test"]
    assert len(rows) == 401 and 20 < len(splits["test"]) < 80
    kiwi = next(t for t in rows if t.payload["name"] == "Kiwi")
    env = GYM.make_env(GymContext())
    run(env.reset(kiwi))
    assert step(env, "[action] Is it a fuzzy fruit?").messages[0]["content"].startswith("Yes")
    assert step(env, "[answer] kiwi").reward == 1.0


def test_bad_public_file(tmp_path):
    bad = tmp_path / "all_entities_refined.json"
    bad.write_text(json.dumps([{"id": "e1", "title": "X", "description": "d", "category": "c"}]))
    with pytest.raises(UsageError, match="record 0 lacks field 'target_entity'"):
        GYM.build_tasks(source=bad)
