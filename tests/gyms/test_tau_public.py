"""tau on the public tau-bench data: loader checks, gold replay of every task, reward edges, baseline."""

from __future__ import annotations

import asyncio
import copy
import functools
import json
import shutil

import pytest

from gyms.tau import GYM, domains, reward
from gyms.tau.common_tools import invoke
from gyms.tau.db import canonical_json, sha256_of
from mua.errors import UsageError
from mua.gym import AgentAction, GymContext, ToolCall

EXPECTED = {"retail": {"train": 500, "dev": 20, "test": 115}, "airline": {"test": 50}}


@pytest.fixture
def tau_dir(shared_data):
    data = shared_data / "tau_bench"
    if not data.is_dir():
        pytest.skip(f"{data} not found")
    return data


@functools.lru_cache(maxsize=2)
def _load_public(folder: str) -> dict:
    return {d: GYM.build_tasks(folder, 0, {"domain": d}) for d in EXPECTED}


@pytest.fixture
def public(tau_dir):
    return _load_public(str(tau_dir))


@pytest.fixture
def opts(tau_dir):
    """gym.options of a recipe over the public data: task rows hold no path, the recipe does."""
    return {"data_dir": str(tau_dir)}


def _message_action(message: dict) -> AgentAction:
    calls = [
        ToolCall(c["function"]["name"], c["function"]["arguments"])
        for c in message.get("tool_calls") or []
    ]
    return AgentAction(text=message.get("content") or "", tool_calls=calls)


async def _expert_episode(task, expert, opts, max_turns: int = 60):
    env = GYM.make_env(GymContext(options=opts))
    reset = await env.reset(task)
    messages = list(reset.messages)
    for _ in range(max_turns):
        action = _message_action(await expert(messages, task))
        messages.append(action.as_message())
        result = await env.step(action)
        messages.extend(result.messages)
        if result.done:
            return result
    raise AssertionError(f"{task.task_id}: expert did not finish in {max_turns} turns")


def test_splits_and_payloads(public, tau_dir):
    assert {d: {s: len(t) for s, t in splits.items()} for d, splits in public.items()} == EXPECTED
    task = public["retail"]["test"][0]
    assert task.task_id == "tau-retail-test-000" and task.gym == "tau"
    assert {"domain", "db", "user_id", "instruction", "actions", "outputs"} <= set(task.payload)
    assert task.prompt[0]["content"] == (tau_dir / "retail" / "policy.md").read_text().strip()
    both = GYM.build_tasks(str(tau_dir), 0, {"domain": "all"})
    assert len(both["test"]) == 165


def test_fresh_database_exports_the_public_layout(public, tau_dir, opts):
    for domain, tables in (
        ("retail", ("orders", "products", "users")),
        ("airline", ("flights", "reservations", "users")),
    ):
        payload = public[domain]["test"][0].payload
        view = domains.load_base(payload, opts).view()
        exported = view.export()
        assert list(exported) == list(tables)
        for table in tables:
            assert exported[table] == json.loads((tau_dir / domain / f"{table}.json").read_text())
        assert view.sha256() == sha256_of(exported)
        assert domains.load_base(payload, opts) is domains.load_base(payload, opts)  # parsed once


def test_every_public_task_replayed_by_the_expert_scores_one(public, opts):
    expert = GYM.expert(GymContext())
    bases_before = {
        d: sha256_of(domains.load_base(public[d]["test"][0].payload, opts).tables) for d in public
    }
    failures, count = [], 0
    for splits in public.values():
        for tasks in splits.values():
            for task in tasks:
                result = asyncio.run(_expert_episode(task, expert, opts))
                count += 1
                if result.reward != 1.0:
                    failures.append((task.task_id, result.components))
    assert count == 685 and failures == []
    for d in public:  # episodes never wrote into the shared base tables
        base = domains.load_base(public[d]["test"][0].payload, opts)
        assert sha256_of(base.tables) == bases_before[d]


def _effective_changes(db) -> str:
    """Canonical JSON of the records that differ from the base (cheap stand-in for the full hash)."""
    base = db.base.tables
    return canonical_json(
        {
            t: {k: db.get(t, k) for k in keys if base[t].get(k) != db.get(t, k)}
            for t, keys in db.changed_keys().items()
        }
    )


def test_dropping_the_last_database_changing_action_scores_zero(public, opts):
    checked, unchanged = 0, {}
    for splits in public.values():
        for split, tasks in splits.items():
            for task in tasks:
                payload = task.payload
                base, cls = domains.load_base(payload, opts), domains.toolset_class(payload)
                actions = payload["actions"]
                db, tools = base.view(), cls(base.view())
                states = [_effective_changes(tools.db)]
                for action in actions:
                    if action["name"] != "transfer_to_human_agents":
                        invoke(tools, action["name"], copy.deepcopy(action["kwargs"]))
                    states.append(_effective_changes(tools.db))
                changing = [k for k in range(len(actions)) if states[k + 1] != states[k]]
                if not changing:
                    unchanged[split] = unchanged.get(split, 0) + 1
                    continue
                last = changing[-1]
                db = reward.replay(base, cls, actions[:last] + actions[last + 1 :])
                value, components, _ = reward.score(db, cls, payload, payload["outputs"])
                assert value == 0.0 and components["db_match"] == 0.0, task.task_id
                checked += 1
    assert unchanged["test"] == 31  # the public count of test tasks that change nothing
    assert checked == 685 - sum(unchanged.values())


def test_do_nothing_baseline_on_public_test_tasks(tau_dir, capsys):
    test = GYM.build_tasks(str(tau_dir), 0, {"domain": "all"})["test"]
    score = GYM.trivial_baseline(test)
    with capsys.disabled():
        print(
            f"\ntau public test: do-nothing baseline {score:.4f} ({round(score * len(test))}/{len(test)})"
        )
    assert (
        round(score * len(test)) == 26
    )  # 31 tasks leave the database unchanged; 5 of them need outputs


def _copy_domain(tau_dir, tmp_path, domain="retail"):
    target = tmp_path / domain
    shutil.copytree(tau_dir / domain, target)
    for f in target.iterdir():
        f.chmod(0o644)
    return target


@pytest.mark.parametrize(
    "file, content, message",
    [
        ("tasks_test.json", "[{", "tasks_test.json: not valid JSON"),
        ("tasks_dev.json", '{"a": 1}', "tasks_dev.json: expected a JSON list of tasks"),
        (
            "tasks_dev.json",
            '[{"user_id": "x", "instruction": "y", "actions": [{"kwargs": {}}]}]',
            "task 0: action 0 must be an object",
        ),
        (
            "tasks_dev.json",
            '[{"user_id": 3, "instruction": "y", "actions": []}]',
            "task 0: field 'user_id'",
        ),
        (
            "tasks_dev.json",
            '[{"user_id": "x", "instruction": "y", "actions": [], "outputs": [1]}]',
            "'outputs' must be a list of strings",
        ),
        ("policy.md", "", "policy.md: policy file is empty"),
    ],
)
def test_bad_public_files_give_one_clear_line(tau_dir, tmp_path, file, content, message):
    folder = _copy_domain(tau_dir, tmp_path)
    (folder / file).write_text(content)
    with pytest.raises(UsageError) as err:
        GYM.build_tasks(str(tmp_path), 0, {"domain": "retail"})
    assert (
        message in str(err.value)
        and str(folder / file) in str(err.value)
        and "\n" not in str(err.value)
    )


def test_bad_database_file_and_paths(tau_dir, tmp_path):
    folder = _copy_domain(tau_dir, tmp_path)
    (folder / "products.json").write_text('{"p1": [1, 2]}')
    with pytest.raises(UsageError, match="products.json: record 'p1' is list"):  # at prep
        GYM.build_tasks(str(tmp_path), 0, {"domain": "retail"})
    with pytest.raises(UsageError, match="not found"):
        GYM.build_tasks(str(tmp_path / "nowhere"), 0, {"domain": "retail"})
    with pytest.raises(UsageError, match="no airline data here"):
        GYM.build_tasks(str(tmp_path), 0, {"domain": "airline"})
    with pytest.raises(UsageError, match="unknown domain"):
        GYM.build_tasks(str(tau_dir), 0, {"domain": "rail"})


def test_prep_round_trip_through_parquet(tau_dir, tmp_path):
    from mua.gym.prep import build_and_write
    from mua.gym.taskfile import read_tasks

    written = build_and_write("tau", tmp_path, source=str(tau_dir), options={"domain": "airline"})
    assert {split: rows for split, (_, rows) in written.items()} == {"test": 50}
    tasks = read_tasks(written["test"][0])
    opts = {"data_dir": str(tau_dir)}
    result = asyncio.run(_expert_episode(tasks[3], GYM.expert(GymContext()), opts))
    assert result.done and result.reward == 1.0
