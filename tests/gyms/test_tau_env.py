"""tau gym contract on the built-in shop: reset/step/close, scripted customer, expert vs random, robustness."""

from __future__ import annotations

import asyncio
import json
import random

import pytest

from gyms.tau import GYM, random_action
from gyms.tau.db import sha256_of
from mua.families.tool_calls import parse_action
from mua.gym import AgentAction, Env, GymContext, ToolCall, get_gym


def _action(message: dict) -> AgentAction:
    calls = [
        ToolCall(c["function"]["name"], c["function"]["arguments"])
        for c in message.get("tool_calls") or []
    ]
    return AgentAction(text=message.get("content") or "", tool_calls=calls)


async def _episode(task, choose, max_turns: int = 20, ctx: GymContext | None = None):
    """Run one episode; `choose(messages)` gives an AgentAction. Returns (reward, last StepResult, env)."""
    env = GYM.make_env(ctx or GymContext())
    reset = await env.reset(task)
    messages = list(reset.messages)
    result = None
    for _ in range(max_turns):
        action = await choose(messages)
        messages.append(action.as_message())
        result = await env.step(action)
        messages.extend(result.messages)
        if result.done:
            break
    await env.close()
    return (result.reward if result and result.done else 0.0), result, env


@pytest.fixture(scope="module")
def tasks():
    return GYM.build_tasks(None, 0, {})


def _all(tasks):
    return tasks["train"] + tasks["test"]


def test_registry_and_builtin_splits(tasks):
    assert get_gym("tau") is GYM
    assert {k: len(v) for k, v in tasks.items()} == {"train": 18, "test": 9}
    ids = [t.task_id for t in _all(tasks)]
    assert len(set(ids)) == len(ids)
    again = GYM.build_tasks(None, 5, {})
    assert [t.to_row() for t in again["test"]] == [t.to_row() for t in tasks["test"]]


def test_reset_gives_policy_opening_and_tool_schemas(tasks):
    task = tasks["train"][0]

    async def go():
        env = GYM.make_env(GymContext())
        assert isinstance(env, Env)
        reset = await env.reset(task)
        await env.close()
        return reset

    reset = asyncio.run(go())
    assert [m["role"] for m in reset.messages] == ["system", "user"]
    assert "policy" in reset.messages[0]["content"].lower()
    assert reset.messages == task.prompt
    names = {t["function"]["name"] for t in reset.tools}
    assert {
        "cancel_pending_order",
        "exchange_delivered_order_items",
        "think",
        "transfer_to_human_agents",
    } <= names
    assert len(names) == 16
    cancel = next(t for t in reset.tools if t["function"]["name"] == "cancel_pending_order")[
        "function"
    ]
    assert cancel["parameters"]["required"] == ["order_id", "reason"]
    assert "order id" in cancel["parameters"]["properties"]["order_id"]["description"]


def test_expert_scores_high_and_random_low(tasks, capsys):
    expert = GYM.expert(GymContext())

    async def run_expert(task):
        async def choose(messages):
            return _action(await expert(messages, task))

        return (await _episode(task, choose))[0]

    async def run_random(task, seed):
        rng = random.Random(seed)

        async def choose(messages):
            return parse_action(random_action(rng), "hermes")

        return (await _episode(task, choose, max_turns=12))[0]

    expert_rewards = [asyncio.run(run_expert(t)) for t in _all(tasks)]
    random_rewards = [asyncio.run(run_random(t, i)) for i, t in enumerate(_all(tasks))]
    expert_mean = sum(expert_rewards) / len(expert_rewards)
    random_mean = sum(random_rewards) / len(random_rewards)
    with capsys.disabled():
        print(
            f"\ntau built-in: expert mean reward {expert_mean:.3f}, random mean reward {random_mean:.3f}, "
            f"do-nothing baseline (test) {GYM.trivial_baseline(tasks['test']):.3f}"
        )
    assert expert_mean == 1.0
    assert random_mean <= 0.15


def test_scripted_customer_answers_identity_and_stops_on_completion(tasks):
    task = next(t for t in _all(tasks) if t.payload["kind"] == "cancel")

    async def go():
        env = GYM.make_env(GymContext())
        await env.reset(task)
        ident = await env.step(AgentAction(text="Could you give me your name and zip code?"))
        email = await env.step(AgentAction(text="What is your email address?"))
        confirm = await env.step(AgentAction(text="I will cancel it. Do you confirm (yes/no)?"))
        done = await env.step(AgentAction(text="Your order has been cancelled."))
        after = await env.step(AgentAction(text="anything"))
        return ident, email, confirm, done, after

    ident, email, confirm, done, after = asyncio.run(go())
    user = task.payload["actions"][0]["kwargs"]
    assert user["zip"] in ident.messages[0]["content"] and not ident.done
    assert "@" in email.messages[0]["content"]
    assert confirm.messages[0]["content"].lower().startswith("yes")
    assert done.done and "###STOP###" in done.messages[0]["content"]
    assert done.reward == 0.0 and done.components == {"db_match": 0.0, "outputs": 1.0}
    assert done.info["termination"] == "user_stop"
    assert after.done and after.messages == []


def test_correct_tool_work_then_stop_scores_one_and_outputs_are_required(tasks):
    task = next(t for t in _all(tasks) if t.payload["kind"] == "order_total")
    amount = task.payload["outputs"][0]

    async def go(say_amount: bool):
        env = GYM.make_env(GymContext())
        await env.reset(task)
        order_id = task.payload["actions"][-1]["kwargs"]["order_id"]
        looked = await env.step(
            AgentAction(text="", tool_calls=[ToolCall("get_order_details", {"order_id": order_id})])
        )
        assert json.loads(looked.messages[0]["content"])["order_id"] == order_id
        text = (
            f"You paid {amount} in total; that request is all done."
            if say_amount
            else "It is all done."
        )
        return await env.step(AgentAction(text=text))

    good, bad = asyncio.run(go(True)), asyncio.run(go(False))
    assert good.done and good.reward == 1.0 and good.components == {"db_match": 1.0, "outputs": 1.0}
    assert bad.done and bad.reward == 0.0 and bad.components == {"db_match": 1.0, "outputs": 0.0}


def test_transfer_ends_episode_and_wrong_change_scores_zero(tasks):
    task = next(t for t in _all(tasks) if t.payload["kind"] == "cancel")
    order_id = task.payload["actions"][-1]["kwargs"]["order_id"]
    wrong = (
        "ordered by mistake"
        if task.payload["actions"][-1]["kwargs"]["reason"] != "ordered by mistake"
        else "no longer needed"
    )

    async def go():
        env = GYM.make_env(GymContext())
        await env.reset(task)
        first = await env.step(
            AgentAction(
                text="",
                tool_calls=[
                    ToolCall("cancel_pending_order", {"order_id": order_id, "reason": wrong})
                ],
            )
        )
        second = await env.step(
            AgentAction(
                text="",
                tool_calls=[
                    ToolCall("transfer_to_human_agents", {"summary": "x"}),
                    ToolCall("think", {"thought": "never run"}),
                ],
            )
        )
        return env, first, second

    env, first, second = asyncio.run(go())
    assert '"status": "cancelled"' in first.messages[0]["content"] and not first.done
    assert second.done and second.info["termination"] == "transfer"
    assert [m["content"] for m in second.messages] == ["Transfer successful"]
    assert second.reward == 0.0 and second.components["db_match"] == 0.0


def test_episodes_are_isolated_and_base_is_untouched(tasks):
    task = next(t for t in _all(tasks) if t.payload["kind"] == "cancel")
    order_id = task.payload["actions"][-1]["kwargs"]["order_id"]

    async def go():
        first, second = GYM.make_env(GymContext()), GYM.make_env(GymContext())
        await first.reset(task)
        await second.reset(task)
        before = second.export_db()
        await first.step(
            AgentAction(
                text="",
                tool_calls=[
                    ToolCall(
                        "cancel_pending_order", {"order_id": order_id, "reason": "no longer needed"}
                    )
                ],
            )
        )
        return first.export_db(), second.export_db(), before, first

    changed, untouched, before, env = asyncio.run(go())
    assert changed["orders"][order_id]["status"] == "cancelled"
    assert untouched == before and untouched["orders"][order_id]["status"] == "pending"
    assert env.db.base.tables["orders"][order_id]["status"] == "pending"
    assert env.db.sha256() == sha256_of(changed)


def test_500_malformed_or_adversarial_actions_raise_nothing(tasks):
    rng = random.Random(0)
    weird_args = [
        None,
        [],
        "x",
        {"order_id": None},
        {"order_id": ["#W1"]},
        {"item_ids": "1"},
        {"expression": "9" * 5000},
        {"expression": "(" * 300},
        {"expression": "2**99999"},
        {"flights": [None]},
        {"amount": float("nan")},
    ]
    names = [
        "cancel_pending_order",
        "exchange_delivered_order_items",
        "modify_pending_order_items",
        "calculate",
        "get_user_details",
        "modify_user_address",
        "return_delivered_order_items",
        "nope",
        "",
        "__init__",
        "_user_of",
    ]

    async def go():
        env = GYM.make_env(GymContext())
        count = 0
        for task in _all(tasks)[:5]:
            await env.reset(task)
            for i in range(100):
                if i % 3 == 0:
                    action = parse_action(random_action(rng), "hermes")
                elif i % 3 == 1:
                    action = AgentAction(
                        text="", tool_calls=[ToolCall(rng.choice(names), rng.choice(weird_args))]
                    )
                else:
                    action = AgentAction(
                        text=rng.choice(["", "###", "\x00", "name? email? order id?", "ok " * 500]),
                        parse_errors=["bad json"] if rng.random() < 0.3 else [],
                    )
                result = await env.step(action)
                assert isinstance(result.reward, float)
                count += 1
                if result.done:
                    await env.reset(task)
        await env.close()
        return count

    assert asyncio.run(go()) == 500


def test_llm_customer_needs_a_client():
    from mua.errors import UsageError

    with pytest.raises(UsageError, match="user.kind is llm"):
        GYM.make_env(GymContext(user_kind="llm"))
