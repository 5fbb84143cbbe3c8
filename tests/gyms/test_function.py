"""Function gym: contract, rewards, expert vs random baselines, adversarial input, public data."""

from __future__ import annotations

import asyncio

import pytest

from gyms.common.actions import parse_bracket_text
from gyms.function import GYM
from gyms.function.rule import RuleError, evaluate
from mua.errors import UsageError
from mua.gym import AgentAction, GymContext, get_gym


def run(coro):
    return asyncio.run(coro)


@pytest.fixture(scope="module")
def tasks():
    return GYM.build_tasks()


def step_text(env, text):
    return run(env.step(parse_bracket_text(text)))


def test_registry_and_splits(tasks):
    assert get_gym("function") is GYM
    assert len(tasks["train"]) == 48 and len(tasks["test"]) == 24
    again = GYM.build_tasks()
    assert [t.payload for t in again["test"]] == [t.payload for t in tasks["test"]]
    ids = [t.task_id for s in tasks.values() for t in s]
    assert len(set(ids)) == len(ids)


def test_probe_search_answer_and_retry(tasks):
    task = tasks["test"][0]
    env = GYM.make_env(GymContext())
    reset = run(env.reset(task))
    assert (
        reset.messages[0]["role"] == "system"
        and "interact_with_env" in reset.messages[0]["content"]
    )
    enum = reset.tools[0]["function"]["parameters"]["properties"]["choice"]["enum"]
    assert "finish" in enum
    probe = step_text(env, "[action] 1 2 3 4")
    assert (
        probe.messages[0]["content"].startswith("f(1, 2, 3, 4)")
        and probe.reward == 0.0
        and not probe.done
    )
    assert f"{evaluate(task.payload['rule'], [1, 2, 3, 4]):g}" in probe.messages[0]["content"]
    assert "Test case" in step_text(env, "[search] test").messages[0]["content"]
    wrong = step_text(env, f"[answer] {task.payload['expected'] + 1}")
    assert wrong.reward == 0.0 and not wrong.done and "Incorrect" in wrong.messages[0]["content"]
    right = step_text(env, f"[answer] {task.payload['expected']!r}")
    assert right.reward == 1.0 and right.done and right.components == {"answer": 1.0}
    after = step_text(env, f"[answer] {task.payload['expected']!r}")
    assert after.reward == 0.0 and after.done


def test_tolerance_weights_and_finish(tasks):
    task = tasks["test"][1]
    env = GYM.make_env(GymContext(reward_weights={"answer": 0.5}))
    run(env.reset(task))
    off = step_text(env, f"[answer] {task.payload['expected'] + 1e-3}")
    assert off.reward == 0.0
    close = step_text(env, f"[answer] {task.payload['expected'] + 5e-7}")
    assert close.reward == 0.5 and close.done
    env = GYM.make_env(GymContext())
    run(env.reset(task))
    fin = step_text(env, "[finish]")
    assert fin.done and fin.reward == 0.0


def test_malformed_inputs_are_observations(tasks):
    env = GYM.make_env(GymContext(options={"rules": "mua"}))
    run(env.reset(tasks["test"][0]))
    for text, needle in [
        ("[action] 1 2 3", "four integers"),
        ("[action] 1.5 2 3 4", "four integers"),
        ("[search] the rule", "only accepts"),
        ("[answer] dunno", "one number"),
        ("", "empty message"),
    ]:
        result = step_text(env, text)
        assert needle in result.messages[0]["content"] and result.reward == 0.0 and not result.done
    plain = run(env.step(AgentAction(text="2 2 2 2")))  # mua rules: plain text is an `action`
    assert plain.messages[0]["role"] == "user" and plain.messages[0]["content"].startswith(
        "f(2, 2, 2, 2)"
    )


def test_test_case_is_refused(tasks):
    """Probing f at the test case would leak the answer: refused with UserRL's message, reward 0."""
    task = tasks["test"][2]
    case = " ".join(str(int(x)) for x in task.payload["test_case"])
    for rules in ("upstream", "mua"):
        env = GYM.make_env(GymContext(options={"rules": rules}))
        run(env.reset(task))
        refused = step_text(env, f"[action] {case}")
        text = refused.messages[0]["content"]
        assert text.startswith(
            "This is the test case and I cannot provide you with the calculation feedback."
        )
        assert f"{task.payload['expected']:g}" not in text.split("\n")[0]
        assert refused.reward == 0.0 and not refused.done


def test_upstream_rules_reward_line_and_plain_text_ends(tasks):
    task = tasks["test"][3]
    env = GYM.make_env(GymContext())  # upstream is the default
    run(env.reset(task))
    probe = step_text(env, "[action] 1 1 1 1")
    assert probe.messages[0]["content"].endswith("\nReward: 0.0")
    right = step_text(env, f"[answer] {task.payload['expected']!r}")
    assert right.messages[0]["content"] == (
        "Correct! That is the value of the function on the test case.\nReward: 1.0"
    )
    env = GYM.make_env(GymContext(reward_weights={"answer": 0.5}))
    run(env.reset(task))
    weighted = step_text(env, f"[answer] {task.payload['expected']!r}")
    assert weighted.messages[0]["content"].endswith("\nReward: 0.5")
    env = GYM.make_env(GymContext())
    run(env.reset(task))
    plain = run(env.step(AgentAction(text="Let me think about 2 2 2 2.")))
    assert plain.done and plain.reward == 0.0 and plain.info["errors"] == {"no_tool_call": 1}
    assert "no tool call" in plain.messages[0]["content"]
    broken = GYM.make_env(GymContext())
    run(broken.reset(task))
    unreadable = run(broken.step(AgentAction(text="", parse_errors=["unterminated <tool_call>"])))
    assert unreadable.done and unreadable.info["errors"]["no_tool_call"] == 1


def test_rule_evaluator_rejects_code_and_undefined_points():
    with pytest.raises(RuleError):
        evaluate("__import__('os').system('true')", [1, 2, 3, 4])
    with pytest.raises(RuleError):
        evaluate("a / (b - c)", [1, 2, 2, 4])
    with pytest.raises(RuleError):
        evaluate("(a - b) ** 0.5", [1, 2, 0, 0])
    with pytest.raises(RuleError):
        evaluate("a ** d", [2, 0, 0, 1000])


def test_public_rules_load_and_agree(shared_data):
    splits = GYM.build_tasks(source=shared_data / "userrl")
    rows = splits["train"] + splits["test"]
    assert len(rows) == 538 and 40 < len(splits["test"]) < 130
    for t in rows:
        assert evaluate(t.payload["rule"], t.payload["test_case"]) == pytest.approx(
            t.payload["expected"], rel=1e-9, abs=1e-9
        )


def test_bad_public_file_is_one_usage_line(tmp_path):
    bad = tmp_path / "functions.json"
    bad.write_text('[{"id": "f1", "rule": "a+b", "test_case": [1, 2, 3]}]')
    with pytest.raises(UsageError, match=r"functions.json: record 0 lacks field 'expected_result'"):
        GYM.build_tasks(source=bad)
    bad.write_text("{oops")
    with pytest.raises(UsageError, match="not valid JSON"):
        GYM.build_tasks(source=tmp_path)
