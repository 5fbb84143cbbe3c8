"""The travel gym under UserRL's rules (`gym.options.rules: upstream`, the default)."""

from __future__ import annotations

import asyncio
import json
import random

import pytest

from gyms.common.actions import call_action
from gyms.travel import GYM, random_action
from gyms.travel.env import SEARCH_FAILURE
from gyms.travel.scenarios import ASPECT_NAMES
from mua.config.users import LLMUserConfig
from mua.families.tool_calls import parse_action
from mua.gym.api import AgentAction, GymContext
from mua.llm.llm_client import LLMClient
from tests.fakes.fake_openai import FakeOpenAIServer


def run(coro):
    return asyncio.run(coro)


@pytest.fixture(scope="module")
def tasks():
    return GYM.build_tasks(None, 0, {"num_train": 2, "num_test": 20, "num_aspects": 3})["test"]


async def _steps(task, actions, ctx=None):
    env = GYM.make_env(ctx or GymContext())
    await env.reset(task)
    return [await env.step(a) for a in actions]


def _wrong(spec):
    return next(o["id"] for o in spec["options"] if o["id"] not in spec["acceptable"])


def test_upstream_is_the_default_and_a_bad_rule_set_is_a_usage_error():
    from mua.errors import UsageError

    assert GYM.make_env(GymContext()).rules == "upstream"
    with pytest.raises(UsageError, match="rules must be 'upstream' or 'mua'"):
        GYM.make_env(GymContext(options={"rules": "userrl"}))


def test_full_best_choice_reward_per_aspect_in_any_order(tasks):
    task = tasks[0]
    a = task.payload["aspects"]
    acceptable = next(i for i in a[0]["acceptable"] if i != a[0]["best"])
    results = run(
        _steps(
            task,
            [
                call_action("answer", a[2]["best"]),  # the last aspect first: not forced in order
                call_action("answer", acceptable),
                call_action("answer", a[0]["best"]),  # the aspect is used up: refused, 0
                call_action("answer", _wrong(a[1])),
            ],
        )
    )
    assert [r.reward for r in results] == [1.0, pytest.approx(0.8), 0.0, 0.0]
    assert "already recommended" in results[2].messages[0]["content"]
    # a wrong pick means not every best option was found: UserRL's env keeps running
    assert not any(r.done for r in results)


def test_episode_ends_when_every_best_option_is_picked(tasks):
    task = tasks[1]
    a = task.payload["aspects"]
    first, rest = run(
        _steps(
            task,
            [
                call_action("answer", a[1]["best"]),
                call_action("answer", f"{a[0]['best']}, {a[2]['best']}"),
            ],
        )
    )
    assert first.reward == 1.0 and not first.done
    assert rest.reward == 2.0 and rest.done


def test_preference_weight_is_0_8_per_preference_asked_for(tasks):
    task = tasks[2]
    name = ASPECT_NAMES[task.payload["aspects"][0]["name"]]
    (result,) = run(_steps(task, [call_action("action", f"What do you prefer for the {name}?")]))
    assert result.components == {"preference": pytest.approx(0.8)}
    assert result.messages[0]["content"].endswith("\nReward: 0.8")


def test_every_fifth_search_fails(tasks):
    task = tasks[3]
    names = [ASPECT_NAMES[a["name"]] for a in task.payload["aspects"]]
    queries = [names[0], names[0], names[1], "fishing boats", names[2], names[2]]
    results = run(_steps(task, [call_action("search", q) for q in queries]))
    texts = [r.messages[0]["content"] for r in results]
    assert texts[4] == f"{SEARCH_FAILURE}\nReward: 0.0"
    assert "options:" in texts[0] and "already have the search results" in texts[1]
    assert "options:" in texts[5]  # the failed search did not use up the aspect
    assert all(t.endswith("\nReward: 0.0") for t in texts)  # search weight 0 upstream


def test_agent_sees_its_reward(tasks):
    task = tasks[4]
    (result,) = run(_steps(task, [call_action("answer", task.payload["aspects"][0]["best"])]))
    assert result.messages[0]["content"].endswith("\nReward: 1.0")
    (mua,) = run(
        _steps(
            task,
            [call_action("answer", task.payload["aspects"][0]["best"])],
            GymContext(options={"rules": "mua"}),
        )
    )
    assert "Reward:" not in mua.messages[0]["content"]


def test_a_turn_without_a_tool_call_ends_the_episode(tasks):
    task = tasks[5]
    plain, after = run(
        _steps(
            task, [AgentAction(text="Which hotel would you like?"), call_action("search", "hotel")]
        )
    )
    assert plain.done and plain.reward == 0.0 and plain.info["errors"]["no_tool_call"] == 1
    assert after.done and after.reward == 0.0


def test_llm_traveller_sees_the_conversation_history(tasks):
    task = tasks[6]
    name = ASPECT_NAMES[task.payload["aspects"][0]["name"]]
    requests = []

    def reply(request):
        requests.append(request)
        return json.dumps({"reply": f"Reply number {len(requests)}.", "revealed": []})

    async def go(base_url):
        cfg = LLMUserConfig(base_url=base_url, model="fake", max_retries=1, timeout_s=5)
        client = LLMClient(cfg)
        try:
            env = GYM.make_env(GymContext(user_kind="llm", llm=client))
            await env.reset(task)
            await env.step(call_action("action", f"Tell me about the {name} you want."))
            await env.step(call_action("action", "Anything else I should know?"))
        finally:
            await client.aclose()

    with FakeOpenAIServer(reply) as server:
        run(go(server.base_url))
    second = requests[1]["messages"][0]["content"]
    assert f"Agent: Tell me about the {name} you want.\nYou: Reply number 1." in second


def test_500_adversarial_actions_raise_nothing_under_upstream_rules(tasks):
    rng = random.Random(1)

    async def go():
        env = GYM.make_env(GymContext())
        await env.reset(tasks[7])
        for i in range(500):
            result = await env.step(parse_action(random_action(rng)))
            assert isinstance(result.reward, float) and result.messages
            if result.done:
                await env.reset(tasks[7 + i % 10])
        await env.close()

    run(go())
