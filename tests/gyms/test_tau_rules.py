"""tau's rule sets (upstream: tau-bench / MUA-RL; mua) and its task data: one tool call per turn,
truncated episodes scored on their database, the customer's instructions, payloads without
paths, unknown user ids stopped at prep."""

from __future__ import annotations

import asyncio
import json
import shutil

import pytest

from gyms.tau import GYM, builtin
from gyms.tau.builtin_tasks import make_task_dicts
from gyms.tau.users import STOP, LLMCustomer
from mua.config.rollout import RolloutConfig
from mua.errors import UsageError
from mua.gym import AgentAction, GymContext, ToolCall
from mua.models import load_tokenizer
from tests.conftest import expert_rollouts

MUA_RULES = {"rules": "mua"}


@pytest.fixture(scope="module")
def tasks():
    splits = GYM.build_tasks(None, 0, {})
    return {t.task_id: t for t in splits["train"] + splits["test"]}


def _two_calls(task) -> AgentAction:
    """A lookup, then the task's own cancellation, in one turn."""
    cancel = task.payload["actions"][-1]
    assert cancel["name"] == "cancel_pending_order"
    return AgentAction(
        text="",
        tool_calls=[
            ToolCall("get_user_details", {"user_id": task.payload["user_id"]}),
            ToolCall(cancel["name"], dict(cancel["kwargs"])),
        ],
    )


def _step_once(task, action, options):
    async def go():
        env = GYM.make_env(GymContext(options=options))
        await env.reset(task)
        result = await env.step(action)
        status = env.db.get("orders", task.payload["actions"][-1]["kwargs"]["order_id"])["status"]
        await env.close()
        return result, status

    return asyncio.run(go())


def test_upstream_runs_only_the_first_tool_call_of_a_turn(tasks):
    task = tasks["tau-builtin-000"]
    result, status = _step_once(task, _two_calls(task), {})
    assert [m["name"] for m in result.messages] == ["get_user_details"]
    assert status == "pending"  # the cancellation, second in the turn, never ran
    assert result.info["errors"] == {"ignored_tool_calls": 1}
    result, status = _step_once(task, _two_calls(task), MUA_RULES)
    assert len(result.messages) == 2 and status == "cancelled"


def _expert_rollout(task, max_turns: int, options: dict):
    cfg = RolloutConfig(max_turns=max_turns, max_new_tokens_per_turn=64, max_total_tokens=65536)
    tok = load_tokenizer("tiny:qwen3-1m")
    (traj,) = expert_rollouts(GYM, [task], tok, cfg, GymContext(options=options))
    return traj


def test_upstream_scores_an_episode_cut_short_on_the_database_it_left(tasks):
    task = tasks["tau-builtin-000"]  # three gold calls, no required output
    assert len(task.payload["actions"]) == 3 and task.payload["outputs"] == []
    done = _expert_rollout(task, max_turns=3, options={})
    assert done.termination == "max_turns" and done.reward == 1.0
    assert done.reward_components == {"db_match": 1.0, "outputs": 1.0}
    assert done.turn_rewards[-1] == 1.0 and sum(done.turn_rewards[:-1]) == 0.0
    short = _expert_rollout(task, max_turns=2, options={})  # the cancellation never happened
    assert short.termination == "max_turns" and short.reward == 0.0
    assert short.reward_components == {"db_match": 0.0, "outputs": 1.0}
    mua = _expert_rollout(task, max_turns=3, options=MUA_RULES)
    assert mua.termination == "max_turns" and mua.reward == 0.0 and mua.reward_components == {}


class _RecordingLLM:
    def __init__(self):
        self.requests = []

    async def complete(self, messages):
        self.requests.append([dict(m) for m in messages])
        return "Hi, I need help with an order."


def _system_prompt(rules: str) -> str:
    llm = _RecordingLLM()
    asyncio.run(LLMCustomer(llm, "You are Ada. Cancel order #W1.", rules=rules).start())
    system, opening = llm.requests[0]
    assert opening == {"role": "user", "content": "Hi! How can I help you today?"}
    return system["content"]


def test_upstream_customer_prompt_carries_tau_benchs_rules():
    prompt = _system_prompt("upstream")
    assert "\n\nInstruction: You are Ada. Cancel order #W1.\n\nRules:\n" in prompt
    rules = [line for line in prompt.splitlines() if line.startswith("- ")]
    assert len(rules) == 6  # the simulator's six rules, in its order
    assert "one line" in rules[0]
    assert "at once" in rules[1]
    assert "order id" in rules[2] and "do not remember" in rules[2]
    assert f"'{STOP}'" in rules[3] and "goal" in rules[3]
    assert "word for word" in rules[4]
    assert "natural" in rules[5] and "personality" in rules[5]
    assert "cannot be achieved" not in prompt  # only a met goal ends the conversation there
    assert "cannot be achieved" in _system_prompt("mua")
    task = next(t for t in GYM.build_tasks(None, 0, {})["train"])
    llm = _RecordingLLM()

    async def go():
        env = GYM.make_env(GymContext(user_kind="llm", llm=llm))
        await env.reset(task)

    asyncio.run(go())
    assert llm.requests[0][0]["content"].startswith("You are a user in a conversation")


def test_bad_rules_and_options_are_one_line():
    with pytest.raises(UsageError, match="gym.options.rules: 'tau-bench' is not one of"):
        GYM.make_env(GymContext(options={"rules": "tau-bench"}))
    with pytest.raises(UsageError, match="gym.options.rule: unknown tau option; did you mean"):
        GYM.make_env(GymContext(options={"rule": "mua"}))
    with pytest.raises(UsageError, match="gym.options.data_dir: /no/such/dir is not a folder"):
        GYM.make_env(GymContext(options={"data_dir": "/no/such/dir"}))


def _write_public_layout(root, tasks: list[dict]) -> None:
    """The built-in shop written in tau-bench's public file layout under root/retail/."""
    folder = root / "retail"
    folder.mkdir(parents=True)
    for table, records in builtin.make_tables().items():
        (folder / f"{table}.json").write_text(json.dumps(records))
    (folder / "policy.md").write_text(builtin.POLICY)
    (folder / "tasks_test.json").write_text(json.dumps(tasks))


def _public_rows(count: int = 3) -> list[dict]:
    keys = ("user_id", "instruction", "actions", "outputs")
    return [{k: row[k] for k in keys} for row in make_task_dicts()[:count]]


def test_unknown_user_id_fails_prep_naming_file_and_task(tmp_path, mua_cli):
    rows = _public_rows()
    rows[1]["user_id"] = "nobody_0000"
    _write_public_layout(tmp_path / "tau", rows)
    code, out, err = mua_cli(
        "prep", "--gym", "tau", "--source", str(tmp_path / "tau"), "--out", str(tmp_path / "out")
    )
    assert code == 2, err
    line = err.strip()
    assert len(line.splitlines()) == 1 and "Traceback" not in err
    assert str(tmp_path / "tau" / "retail" / "tasks_test.json") in line
    assert "task 1" in line and "'nobody_0000'" in line
    assert not (tmp_path / "out" / "test.parquet").exists()


def _expert_episode(task, options):
    async def go():
        env = GYM.make_env(GymContext(options=options))
        reset = await env.reset(task)
        messages, expert = list(reset.messages), GYM.expert(GymContext())
        for _ in range(12):
            message = await expert(messages, task)
            calls = [
                ToolCall(c["function"]["name"], c["function"]["arguments"])
                for c in message.get("tool_calls") or []
            ]
            result = await env.step(
                AgentAction(text=message.get("content") or "", tool_calls=calls)
            )
            messages += [message, *result.messages]
            if result.done:
                return result.reward
        return None

    return asyncio.run(go())


def test_payloads_hold_no_path_and_moved_data_keeps_working(tmp_path):
    _write_public_layout(tmp_path / "first", _public_rows())
    tasks = GYM.build_tasks(str(tmp_path / "first"), 0, {"domain": "retail"})["test"]
    rows = json.dumps([t.to_row() for t in tasks])
    assert str(tmp_path) not in rows and tasks[0].payload["db"] == "tau-bench"
    shutil.move(tmp_path / "first", tmp_path / "moved")
    assert _expert_episode(tasks[0], {"data_dir": str(tmp_path / "moved")}) == 1.0
    with pytest.raises(UsageError, match="tau-retail-test-000 .* set gym.options.data_dir"):
        _expert_episode(tasks[0], {})
    # Through the runner too: a configuration error stops the run instead of scoring 0.
    with pytest.raises(UsageError, match="gym.options.data_dir"):
        _expert_rollout(tasks[0], max_turns=4, options={})
    assert GYM.trivial_baseline(tasks) == 0.0  # recorded at prep: needs no database now
