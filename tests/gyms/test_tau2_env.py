"""tau2 episodes with the scripted user: the gold expert scores 1, reward edges, bad input."""

from __future__ import annotations

import asyncio
import copy
import json
import shutil
import threading
import time

import pytest

from gyms.tau2 import GYM, reward
from gyms.tau2.domain import load_domain
from gyms.tau2.expert import expert_message
from mua.errors import UsageError
from mua.gym import AgentAction, GymContext, ToolCall


@pytest.fixture(scope="module")
def tau2_dir():
    from tests.conftest import shared_dir

    data = shared_dir() / "data" / "tau2"
    if not (data / "tau2" / "domains").is_dir():
        pytest.skip(f"tau2 data not found at {data} (set MUA_SHARED to the shared/ folder)")
    return data


@pytest.fixture(scope="module")
def tasks(tau2_dir):
    return {d: GYM.build_tasks(str(tau2_dir), 0, {"domain": d}) for d in ("retail", "airline")}


def _action(message: dict) -> AgentAction:
    calls = [
        ToolCall(c["function"]["name"], c["function"]["arguments"])
        for c in message.get("tool_calls") or []
    ]
    return AgentAction(text=message.get("content") or "", tool_calls=calls)


async def _play(task, options, policy=expert_message, max_turns=40):
    env = GYM.make_env(GymContext(options=options))
    reset = await env.reset(task)
    messages = list(reset.messages)
    for _ in range(max_turns):
        message = policy(messages, task)
        messages.append(message)
        result = await env.step(_action(message))
        messages.extend(result.messages)
        if result.done:
            return result, messages
    raise AssertionError("episode did not end")


def play(task, options, **kw):
    return asyncio.run(_play(task, options, **kw))


def test_published_split_sizes(tasks):
    sizes = {d: {s: len(t) for s, t in splits.items()} for d, splits in tasks.items()}
    assert sizes == {
        "retail": {"train": 74, "test": 40, "base": 114},
        "airline": {"train": 30, "test": 20, "base": 50},
    }
    ids = [t.task_id for t in tasks["retail"]["base"]]
    assert len(set(ids)) == 114 and ids[0].startswith("tau2-retail-")


def test_expert_scores_one_on_db_only_retail_tasks(tasks, tau2_dir):
    db_only = [
        t
        for t in tasks["retail"]["base"]
        if t.payload["task"]["evaluation_criteria"]["reward_basis"] == ["DB"]
    ]
    assert len(db_only) == 2
    for task in db_only:
        result, messages = play(task, {"data_dir": str(tau2_dir)})
        assert result.reward == 1.0 and result.components == {"db": 1.0}
        assert result.info["termination"] == "user_stop" and result.info["comparable"]
        assert messages[1] == {"role": "assistant", "content": "Hi! How can I help you today?"}


def test_expert_on_airline_communicate_task(tasks, tau2_dir):
    task = next(
        t
        for t in tasks["airline"]["base"]
        if t.payload["task"]["evaluation_criteria"]["communicate_info"]
        and t.payload["task"]["evaluation_criteria"]["actions"]
    )
    result, _ = play(task, {"data_dir": str(tau2_dir)})
    assert result.reward == 1.0
    assert result.components == {"db": 1.0, "communicate": 1.0}

    def silent(messages, task):  # the expert without the required information
        msg = expert_message(messages, task)
        if not msg.get("tool_calls"):
            return {"role": "assistant", "content": "Your request has been completed."}
        return msg

    result, _ = play(task, {"data_dir": str(tau2_dir)}, policy=silent)
    assert result.reward == 0.0 and result.components == {"db": 1.0, "communicate": 0.0}


def test_wrong_write_fails_the_db_check(tasks, tau2_dir):
    task = copy.deepcopy(
        next(
            t
            for t in tasks["retail"]["base"]
            if t.payload["task"]["evaluation_criteria"]["reward_basis"] == ["DB"]
        )
    )
    gold = task.payload["task"]["evaluation_criteria"]["actions"]

    def wrong(messages, t):
        msg = expert_message(messages, task)
        for call in msg.get("tool_calls") or []:
            if call["function"]["name"].startswith(("modify", "cancel", "exchange", "return")):
                call["function"]["name"] = "modify_user_address"
                call["function"]["arguments"] = {
                    "user_id": next(
                        a["arguments"]["user_id"]
                        for a in gold
                        if "user_id" in (a.get("arguments") or {})
                    )
                    if any("user_id" in (a.get("arguments") or {}) for a in gold)
                    else "nobody",
                    **dict.fromkeys(["address1", "address2", "city", "state", "country"], "x"),
                    "zip": "00000",
                }
        return msg

    result, _ = play(task, {"data_dir": str(tau2_dir)}, policy=wrong)
    assert result.reward == 0.0 and result.components["db"] == 0.0


def test_nl_task_needs_a_judge_or_the_named_judge_free_basis(tasks, tau2_dir):
    task = next(
        t
        for t in tasks["retail"]["base"]
        if t.payload["task"]["evaluation_criteria"].get("nl_assertions")
    )
    env = GYM.make_env(GymContext(options={"data_dir": str(tau2_dir)}))
    with pytest.raises(UsageError, match="NL assertions; set gym.options.judge"):
        asyncio.run(env.reset(task))
    result, _ = play(task, {"data_dir": str(tau2_dir), "basis": "no_nl"})
    assert result.info["comparable"] is False
    assert "nl_assertion" not in result.components
    assert result.info["reward_info"]["skipped"] == ["NL_ASSERTION"]


def test_unended_conversation_and_error_cap_score_zero(tasks, tau2_dir):
    task = tasks["airline"]["base"][0]
    domain = load_domain("airline", tau2_dir)
    assert reward.score(domain, task.payload["task"], [], [], "max_turns")[0] == 0.0
    env = GYM.make_env(GymContext(options={"data_dir": str(tau2_dir), "max_errors": 2}))
    asyncio.run(env.reset(task))
    bad = AgentAction(text="", tool_calls=[ToolCall("get_user_details", {"who": 1})])
    first = asyncio.run(env.step(bad))
    assert not first.done
    assert first.messages[0]["content"].startswith("Error: ")
    assert "unexpected keyword argument 'who'" in first.messages[0]["content"]
    second = asyncio.run(env.step(bad))
    assert second.done and second.reward == 0.0
    assert second.info["termination"] == "too_many_errors"


def test_only_the_first_tool_call_of_a_turn_runs(tasks, tau2_dir):
    task = tasks["airline"]["base"][0]
    env = GYM.make_env(GymContext(options={"data_dir": str(tau2_dir)}))
    asyncio.run(env.reset(task))
    calls = [
        ToolCall("calculate", {"expression": "1+1"}),
        ToolCall("calculate", {"expression": "2"}),
    ]
    out = asyncio.run(env.step(AgentAction(text="", tool_calls=calls)))
    assert [m["content"] for m in out.messages] == ["2.0"]
    assert out.info["errors"] == {"ignored_tool_calls": 1}


@pytest.mark.timeout(60, method="thread")
def test_an_exponent_tower_is_a_prompt_tool_error(tasks, tau2_dir):
    task = tasks["retail"]["base"][0]
    env = GYM.make_env(GymContext(options={"data_dir": str(tau2_dir)}))
    asyncio.run(env.reset(task))
    tower = AgentAction(text="", tool_calls=[ToolCall("calculate", {"expression": "9**9**9**9"})])
    start = time.monotonic()
    out = asyncio.run(env.step(tower))
    assert time.monotonic() - start < 1.0
    assert [m["content"] for m in out.messages] == ["Error: Number too large in expression"]
    assert out.info["errors"] == {"tool_error": 1} and not out.done


@pytest.mark.timeout(60, method="thread")
def test_a_slow_tool_is_cut_by_the_deadline_on_the_step(tasks, tau2_dir):
    """The agent's tool runs off the event loop: a deadline around env.step fires on time."""
    task = tasks["airline"]["base"][0]
    env = GYM.make_env(GymContext(options={"data_dir": str(tau2_dir)}))
    asyncio.run(env.reset(task))
    release = threading.Event()

    def spin(*_args):
        while not release.is_set():
            pass
        return "late", False

    env.env.tool_call = spin
    action = AgentAction(text="", tool_calls=[ToolCall("calculate", {"expression": "1"})])
    start = time.monotonic()
    try:
        with pytest.raises(asyncio.TimeoutError):
            asyncio.run(asyncio.wait_for(env.step(action), 0.3))
        assert time.monotonic() - start < 2.0
    finally:
        release.set()


def test_bad_data_folders_are_one_line_usage_errors(tmp_path, tau2_dir):
    with pytest.raises(UsageError, match="does not exist"):
        GYM.build_tasks(str(tmp_path / "nope"), 0, {"domain": "airline"})
    with pytest.raises(UsageError, match="unknown prep option 'domian'"):
        GYM.build_tasks(str(tau2_dir), 0, {"domian": "airline"})
    with pytest.raises(UsageError, match="unknown domain 'shop'"):
        GYM.build_tasks(str(tau2_dir), 0, {"domain": "shop"})
    copy_dir = tmp_path / "data"
    shutil.copytree(tau2_dir / "tau2" / "domains" / "airline", copy_dir / "tau2/domains/airline")
    (copy_dir / "tau2/domains/airline/policy.md").unlink()
    with pytest.raises(UsageError, match=r"missing .*policy\.md"):
        GYM.build_tasks(str(copy_dir), 0, {"domain": "airline"})
    shutil.copy(tau2_dir / "tau2/domains/airline/policy.md", copy_dir / "tau2/domains/airline")
    split = copy_dir / "tau2/domains/airline/split_tasks.json"
    split.write_text(json.dumps({"base": ["0", "no-such-task"]}))
    with pytest.raises(UsageError, match="different versions"):
        GYM.build_tasks(str(copy_dir), 0, {"domain": "airline"})
    shutil.copy(tau2_dir / "tau2/domains/airline/split_tasks.json", split)
    db = copy_dir / "tau2/domains/airline/db.json"
    db.write_text(json.dumps({"flights": {}, "users": {}, "reservations": {}, "extra": 1}))
    with pytest.raises(UsageError, match="not tau2-bench v1.0.1 data"):
        GYM.build_tasks(str(copy_dir), 0, {"domain": "airline"})
    for err in (UsageError,):
        with pytest.raises(err, match="no built-in tasks"):
            GYM.build_tasks(None, 0, {})


def test_failing_initialization_action_names_the_task(tasks, tau2_dir):
    task = copy.deepcopy(tasks["airline"]["base"][0])
    task.payload["task"]["initial_state"] = {
        "initialization_actions": [
            {"env_type": "assistant", "func_name": "no_such_function", "arguments": {}}
        ]
    }
    env = GYM.make_env(GymContext(options={"data_dir": str(tau2_dir)}))
    with pytest.raises(UsageError, match=r"task tau2-airline-0: initialization action 0"):
        asyncio.run(env.reset(task))


def test_unknown_option_and_missing_data_dir(tasks):
    with pytest.raises(UsageError, match="did you mean 'persona'"):
        GYM.make_env(GymContext(options={"personna": "x"}))
    env = GYM.make_env(GymContext(options={}))
    with pytest.raises(UsageError, match="gym.options.data_dir"):
        asyncio.run(env.reset(tasks["airline"]["base"][0]))


def test_300_adversarial_actions_raise_nothing(tasks, tau2_dir):
    import random

    from gyms.tau2 import random_action
    from mua.families.tool_calls import parse_action

    rng = random.Random(0)
    ended = 0
    for task in tasks["airline"]["base"][:3] + tasks["retail"]["base"][:3]:
        env = GYM.make_env(GymContext(options={"data_dir": str(tau2_dir), "basis": "no_nl"}))
        asyncio.run(env.reset(task))
        for _ in range(50):
            result = asyncio.run(env.step(parse_action(random_action(rng), "hermes")))
            if result.done:
                ended += 1
                assert result.reward == 0.0 or result.info["termination"] in reward.ENDED
                break
    assert ended >= 1
