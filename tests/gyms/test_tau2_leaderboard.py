"""tau2 under `profile: leaderboard`: texts and schemas read from a tau2-bench checkout.

The checkout is assembled in a temporary folder from the shared data (tests/gyms/
tau2_checkout.py). `tau2_reference/leaderboard.json` holds digests of what tau2-bench's own
code first sends the agent model and the user model for every task of retail, airline and
telecom (`make_leaderboard_reference.py` beside it computed them); the project's side is
computed here from the same checkout and must match byte for byte, keys in the order they are
sent (JSON with no key sorting).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

from gyms.tau2 import GYM
from gyms.tau2.domain import load_domain
from gyms.tau2.leaderboard.checkout import find_checkout
from gyms.tau2.leaderboard.profile import agent_opening, user_opening
from gyms.tau2.leaderboard.source import Tau2Source
from gyms.tau2.options import check_options
from gyms.tau2.tasks import read_tasks
from mua.errors import UsageError
from mua.gym import GymContext
from tests.gyms.tau2_checkout import assemble, missing, tau2_checkout  # noqa: F401

REFERENCE = Path(__file__).parent / "tau2_reference" / "leaderboard.json"
DOMAINS = ("retail", "airline", "telecom")


def _short(value) -> str:
    return hashlib.sha256(json.dumps(value).encode()).hexdigest()[:16]  # keys as sent


def _records(checkout: Path, domain: str) -> list[dict]:
    source = Tau2Source(find_checkout(checkout))
    data = checkout / "data"
    tasks, _ = read_tasks(data, domain)
    env = load_domain(domain, data).new_environment()
    agent = _short(agent_opening(source, env, domain))
    return [
        {"id": str(t["id"]), "agent": agent, "user": _short(user_opening(source, env, domain, t))}
        for t in tasks
    ]


def test_checkout_is_recognised(tau2_checkout, tmp_path):  # noqa: F811
    found = find_checkout(tau2_checkout)
    assert found is not None and found.version == "1.0.1" and found.commit is None
    assert find_checkout(tau2_checkout / "data") == found
    assert find_checkout(tau2_checkout / "data" / "tau2") is None  # a bare data folder
    # a git checkout: the commit behind HEAD (a branch in packed-refs)
    repo = assemble(tmp_path / "git-checkout")
    sha = "a2c024725189473d2d7cea3a5cfdbcc67478e41f"
    (repo / ".git").mkdir()
    (repo / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (repo / ".git" / "packed-refs").write_text(f"# pack-refs\n{sha} refs/heads/main\n")
    assert find_checkout(repo).describe() == {"version": "1.0.1", "commit": sha}


@pytest.mark.parametrize("domain", DOMAINS)
def test_first_requests_equal_tau2s_on_every_task(tau2_checkout, domain):  # noqa: F811
    reference = json.loads(REFERENCE.read_text())
    records = _records(tau2_checkout, domain)
    assert len(records) == reference["tasks"][domain]
    if domain in reference.get("records", {}):
        expected = {r["id"]: r for r in reference["records"][domain]}
        wrong = [r["id"] for r in records if r != expected[r["id"]]]
        assert not wrong, f"{len(wrong)} {domain} tasks differ from tau2's, first {wrong[0]}"
    digest = hashlib.sha256(json.dumps(records, sort_keys=True).encode()).hexdigest()
    assert digest == reference["digests"][domain]


def test_texts_come_from_the_checkout(tau2_checkout, tmp_path):  # noqa: F811
    """Change tau2's agent instruction and guidelines in a copy: the profile follows them."""
    copy = tmp_path / "edited"
    (copy / "src" / "tau2").mkdir(parents=True)
    for item in (tau2_checkout / "src" / "tau2").iterdir():
        if item.name != "agent":
            (copy / "src" / "tau2" / item.name).symlink_to(item.resolve())
    shutil.copytree(tau2_checkout / "src" / "tau2" / "agent", copy / "src" / "tau2" / "agent")
    agent_py = copy / "src" / "tau2" / "agent" / "llm_agent.py"
    agent_py.write_text(agent_py.read_text().replace("You are a customer service agent", "EDITED"))
    (copy / "pyproject.toml").symlink_to((tau2_checkout / "pyproject.toml").resolve())
    data = copy / "data" / "tau2"
    data.mkdir(parents=True)
    for item in (tau2_checkout / "data" / "tau2").iterdir():
        if item.name != "user_simulator":
            (data / item.name).symlink_to(item.resolve())
    shutil.copytree(tau2_checkout / "data" / "tau2" / "user_simulator", data / "user_simulator")
    (data / "user_simulator" / "simulation_guidelines.md").write_text(
        "GUIDELINES<PERSONA_GUIDELINES>"
    )
    source = Tau2Source(find_checkout(copy))
    env = load_domain("airline", copy / "data").new_environment()
    task = read_tasks(copy / "data", "airline")[0][0]
    system = agent_opening(source, env, "airline")["messages"][0]["content"]
    assert "EDITED" in system and "You are a customer service agent" not in system
    user = user_opening(source, env, "airline", task)["messages"][0]["content"]
    assert user.startswith("GUIDELINES\n\n<scenario>\nInstructions:\n\tDomain: airline")


def test_profile_without_checkout_is_refused(tau2_checkout):  # noqa: F811
    bare = tau2_checkout / "data" / "tau2"
    with pytest.raises(UsageError) as err:
        check_options({"profile": "leaderboard", "data_dir": str(bare)})
    text = str(err.value)
    assert "\n" not in text and "tau2-bench" in text and "src/tau2" in text
    with pytest.raises(UsageError, match="checkout"):
        GYM.build_tasks(str(bare), 0, {"domain": "airline", "profile": "leaderboard"})
    assert check_options({"profile": "leaderboard", "data_dir": str(tau2_checkout)}).checkout
    for domain, extra in (("telecom", {"solo": True}), ("airline", {"persona": "non_cooperative"})):
        task = GYM.build_tasks(str(tau2_checkout), 0, {"domain": domain})["base"][0]
        options = {"profile": "leaderboard", "data_dir": str(tau2_checkout), **extra}
        env = GYM.make_env(GymContext(options=options))
        with pytest.raises(UsageError, match="profile leaderboard") as err:
            asyncio.run(env.reset(task))
        assert "\n" not in str(err.value)


def test_prep_from_a_checkout_records_it(tau2_checkout):  # noqa: F811
    plain = GYM.build_tasks(str(tau2_checkout), 0, {"domain": "airline"})
    row = plain["base"][0]
    assert row.payload["tau2_checkout"] == {"version": "1.0.1", "commit": None}
    assert row.prompt[1] == {"role": "assistant", "content": "Hi! How can I help you today?"}
    board = GYM.build_tasks(str(tau2_checkout), 0, {"domain": "airline", "profile": "leaderboard"})
    source = Tau2Source(find_checkout(tau2_checkout))
    env = load_domain("airline", tau2_checkout / "data").new_environment()
    assert board["base"][0].prompt == agent_opening(source, env, "airline")["messages"]
    assert board["base"][0].prompt[1]["tool_calls"] is None
    bare = GYM.build_tasks(str(tau2_checkout / "data" / "tau2"), 0, {"domain": "airline"})
    assert "tau2_checkout" not in bare["base"][0].payload


class _Endpoint:
    """Records each request; answers text, after one phone tool call when asked to."""

    def __init__(self, tool_first: str | None = None, written: bool = False):
        self.requests: list[dict] = []
        self.tool_first = tool_first
        self.written = written  # the call written in the text (hermes), not structured

    async def chat(self, messages, parse=None, **kwargs):
        self.requests.append({"messages": json.loads(json.dumps(messages)), **kwargs})
        if self.tool_first and len(self.requests) == 1 and self.written:
            text = f'<tool_call>\n{{"name": "{self.tool_first}", "arguments": {{}}}}\n</tool_call>'
            message = SimpleNamespace(content=text, tool_calls=None)
        elif self.tool_first and len(self.requests) == 1:
            call = SimpleNamespace(
                id="c1", function=SimpleNamespace(name=self.tool_first, arguments="{}")
            )
            message = SimpleNamespace(content=None, tool_calls=[call])
        else:
            message = SimpleNamespace(content="My phone has no service.", tool_calls=None)
        return message, parse(message) if parse else None


@pytest.mark.parametrize("domain", DOMAINS)
def test_env_sends_the_openings(tau2_checkout, domain):  # noqa: F811
    """What the env gives the agent and sends the user model is the profile's opening."""
    tool = "check_status_bar" if domain == "telecom" else None
    llm = SimpleNamespace(
        endpoint=_Endpoint(tool), cfg=SimpleNamespace(temperature=0.0, max_tokens=None)
    )
    options = {"data_dir": str(tau2_checkout), "profile": "leaderboard", "basis": "no_nl"}
    task = GYM.build_tasks(str(tau2_checkout), 0, {"domain": domain})["base"][0]
    env = GYM.make_env(GymContext(options=options, user_kind="llm", llm=llm))
    reset = asyncio.run(env.reset(task))
    source = Tau2Source(find_checkout(tau2_checkout))
    domain_env = load_domain(domain, tau2_checkout / "data").new_environment()
    agent = agent_opening(source, domain_env, domain)
    assert reset.messages[:2] == agent["messages"] and reset.tools == agent["tools"]
    assert "tool_calls" in reset.messages[1] and reset.messages[1]["tool_calls"] is None
    user = user_opening(source, domain_env, domain, task.payload["task"])
    first = llm.endpoint.requests[0]
    assert first["messages"] == user["messages"]
    assert first.get("tools") == user["tools"]
    assert (user["tools"] is not None) == (domain == "telecom")
    if tool:  # the user's tool ran on its phone and its result went back as a tool message
        second = llm.endpoint.requests[1]["messages"]
        assert second[-2]["tool_calls"][0]["function"]["name"] == tool
        assert second[-1]["role"] == "tool" and second[-1]["tool_call_id"] == "c1"
    assert reset.messages[2] == {"role": "user", "content": "My phone has no service."}


def test_user_calls_written_as_text_run_with_its_tool_parser(tau2_checkout):  # noqa: F811
    """With `user.tool_parser`, a telecom user's call written in its text (hermes) runs on its
    phone as a structured one does; without it the text is the user's message."""
    import mua.families.tool_calls  # noqa: F401  (hands the family readers to mua.llm)

    options = {"data_dir": str(tau2_checkout), "profile": "leaderboard", "basis": "no_nl"}
    task = GYM.build_tasks(str(tau2_checkout), 0, {"domain": "telecom"})["base"][0]
    for parser in ("hermes", None):
        llm = SimpleNamespace(
            endpoint=_Endpoint("check_status_bar", written=True),
            cfg=SimpleNamespace(temperature=0.0, max_tokens=None, tool_parser=parser),
        )
        env = GYM.make_env(GymContext(options=options, user_kind="llm", llm=llm))
        reset = asyncio.run(env.reset(task))
        if parser:
            second = llm.endpoint.requests[1]["messages"]
            assert second[-2]["tool_calls"][0]["function"]["name"] == "check_status_bar"
            assert second[-1]["role"] == "tool"
            assert reset.messages[2]["content"] == "My phone has no service."
        else:
            assert len(llm.endpoint.requests) == 1
            assert "<tool_call>" in reset.messages[2]["content"]


TAU2_DEFAULT = "gpt-4.1-2025-04-14"  # tau2 v1.0.1's config.py: user and NL-assertion judge


def _eval_folder(
    folder: Path, checkout: Path, trials=4, domain="airline", gym="tau2", **changes
) -> Path:
    """An eval output folder as `mua eval` leaves it, for every base task of `domain`; rows
    carry `gym` (a labelled entry's label)."""
    split = json.loads((checkout / "data/tau2/domains" / domain / "split_tasks.json").read_text())
    options = {
        "data_dir": str(checkout),
        "profile": "leaderboard",
        "judge": {"base_url": "http://judge", "model": TAU2_DEFAULT, "temperature": 0.0},
        **changes.pop("options", {}),
    }
    user = {"kind": "llm", "model": TAU2_DEFAULT, "temperature": 0.0, **changes.pop("user", {})}
    ids = split["base"][: changes.pop("tasks", None)]
    rows = [
        {
            "gym": gym,
            "task_id": f"tau2-{domain}-{i}",
            "sample_index": k,
            "reward": float(k % 2),
            "excluded": False,
            "termination": "done",
            "reward_components": {"db": float(k % 2)},
            "messages": [{"role": "user", "content": "thanks ###STOP###"}],
        }
        for i in ids
        for k in range(trials)
    ]
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / "results.jsonl").open("a") as results:
        results.write("".join(json.dumps(r) + "\n" for r in rows))
    config = {"gym_options": {"tau2": options}, "user": user}
    config["max_turns"] = changes.pop("max_turns", 100)
    (folder / "eval_config.json").write_text(json.dumps(config))
    return folder


def _report(folder: Path) -> list[str]:
    return _report_args(str(folder)).splitlines()


def test_report_says_comparable_only_as_the_leaderboard_runs(tau2_checkout, tmp_path):  # noqa: F811
    lines = _report(_eval_folder(tmp_path / "same", tau2_checkout))
    assert lines[0] == "comparable with tau2 v1.0.1 leaderboard: yes"
    assert lines[1] == "tau2-bench checkout: version 1.0.1, commit unknown"
    assert any(x.startswith("airline: tasks=50 trials=200") for x in lines)

    cases = {
        "user model: gpt-4o-mini, not gpt-4.1-2025-04-14": {"user": {"model": "gpt-4o-mini"}},
        "user temperature: 0.7, not 0.0": {"user": {"temperature": 0.7}},
        "user: scripted, not an LLM user": {"user": {"kind": "scripted"}},
        "judge model: qwen3, not gpt-4.1-2025-04-14": {
            "options": {"judge": {"model": "qwen3", "temperature": 0.0}}
        },
        "judge: none set": {"options": {"judge": None}},
        "basis: no_nl (NL assertions not judged)": {"options": {"basis": "no_nl"}},
        "prompts: mua's own wording (set gym.options.profile: leaderboard)": {
            "options": {"profile": "mua"}
        },
        "trials: 1 per task, not 4": {"trials": 1},
        "max_errors: 3, not 10": {"options": {"max_errors": 3}},
        "max_turns: 60 agent turns, fewer than tau2's 200 steps allow": {"max_turns": 60},
        "tasks: airline has 10 of the 50 base tasks": {"tasks": 10},
    }
    for i, (difference, change) in enumerate(cases.items()):
        folder = _eval_folder(tmp_path / f"case{i}", tau2_checkout, **change)
        first = _report(folder)[0]
        assert first.startswith("comparable with tau2 v1.0.1 leaderboard: no ("), first
        assert difference in first, first
    bare = _eval_folder(
        tmp_path / "bare", tau2_checkout, options={"data_dir": str(tau2_checkout / "data/tau2")}
    )
    first = _report(bare)[0]
    assert first.startswith("comparable with tau2 leaderboard: no (prompts: mua's own")


def test_labelled_entries_are_found(tau2_checkout, tmp_path):  # noqa: F811
    """One labelled entry per domain (as recipes/seeds/mua_rl_tau2_eval.yaml has them): every
    row counts, each entry's trials are its own, another gym's rows do not count."""
    from gyms.tau2.leaderboard.comparable import report_lines

    folder = tmp_path / "labelled"
    for domain in ("airline", "retail"):
        _eval_folder(folder, tau2_checkout, domain=domain, gym=f"tau2_{domain}")
    with (folder / "results.jsonl").open("a") as results:
        other = {"gym": "tau", "task_id": "retail-0", "sample_index": 0, "reward": 1.0}
        results.write(json.dumps(other) + "\n")
    yes = "comparable with tau2 v1.0.1 leaderboard: yes"
    assert report_lines(folder)[0] == yes
    lines = _report(folder)
    assert lines[0] == yes
    assert any(x.startswith("airline: tasks=50 trials=200") for x in lines), lines
    assert any(x.startswith("retail: tasks=114 trials=456") for x in lines), lines
    # the same airline tasks once more under a second label, 1 trial each: that entry has 1
    _eval_folder(folder, tau2_checkout, trials=1, gym="tau2_again")
    assert "trials: 1 per task, not 4" in report_lines(folder)[0]
    # a user matrix's cells (`<label>@<user>`) are counted, and the matrix named as a difference
    matrix = tmp_path / "matrix"
    for user in ("plain", "impatient"):
        _eval_folder(matrix, tau2_checkout, gym=f"tau2_airline@{user}")
    config = json.loads((matrix / "eval_config.json").read_text())
    config["users"] = [{"label": "plain"}, {"label": "impatient", "temperature": 1.0}]
    (matrix / "eval_config.json").write_text(json.dumps(config))
    assert report_lines(matrix)[0] == (
        "comparable with tau2 v1.0.1 leaderboard: no (users: a user matrix (eval.users) plays "
        "the user, not tau2's user alone)"
    )


def test_mua_eval_prints_the_comparability_line(tau2_checkout, tmp_path, mua_cli):  # noqa: F811
    data = tmp_path / "airline"
    code, out, err = mua_cli(
        "prep", "--gym", "tau2", "--source", str(tau2_checkout), "--option", "domain=airline",
        "--option", "profile=leaderboard", "--out", str(data),
    )  # fmt: skip
    assert code == 0, err[-2000:]
    recipe = tmp_path / "eval.yaml"
    recipe.write_text(
        "verb: eval\nmodel: {path: expert}\nuser: {kind: scripted}\ngyms:\n  - name: tau2\n"
        f"    options: {{data_dir: {tau2_checkout}, profile: leaderboard, basis: no_nl}}\n"
        f"    test_files: [{data / 'base.parquet'}]\n"
    )
    code, out, err = mua_cli(
        "eval", str(recipe), "--max-tasks", "2", "-n", "1", "--no-mlflow", "--out", str(tmp_path / "o")
    )  # fmt: skip
    assert code == 0, err[-2000:]
    line = next(x for x in out.splitlines() if x.startswith("comparable with tau2"))
    assert line.startswith("comparable with tau2 v1.0.1 leaderboard: no (user: scripted")
    assert "basis: no_nl" in line and "trials: 1 per task, not 4" in line
    assert "tau2-bench checkout: version 1.0.1, commit unknown" in out
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert summary["notes"]["tau2"][0] == line  # the summary keeps what was printed
    assert "tau2-bench checkout: version 1.0.1, commit unknown" in summary["notes"]["tau2"]


def test_judge_request_and_reading_equal_tau2s(tau2_checkout):  # noqa: F811
    from gyms.tau2.leaderboard.judge import judge_messages, read_verdicts
    from tests.gyms.tau2_reference.make_leaderboard_reference import (
        JUDGED_CONVERSATION,
        canned_verdicts,
    )

    reference = json.loads(REFERENCE.read_text())["judge"]
    source = Tau2Source(find_checkout(tau2_checkout))
    transcript = [{"role": role, "content": content} for role, content in JUDGED_CONVERSATION]
    checked = 0
    for domain, records in reference.items():
        tasks = {str(t["id"]): t for t in read_tasks(tau2_checkout / "data", domain)[0]}
        for record in records:
            assertions = tasks[record["id"]]["evaluation_criteria"]["nl_assertions"]
            assert _short(judge_messages(source, transcript, assertions)) == record["judge"]
            assert read_verdicts(canned_verdicts(assertions)) == record["met"]
            checked += 1
    assert checked == 90  # retail 40, airline 50
    assert read_verdicts('{"results": []}') == []  # tau2 scores an empty list as met
    with pytest.raises(ValueError):
        read_verdicts('```json\n{"results": []}\n```')  # tau2 parses the bare reply


def test_env_judges_with_tau2s_judge(tau2_checkout, monkeypatch):  # noqa: F811
    from gyms.tau2.env import Tau2Env
    from gyms.tau2.leaderboard.judge import judge_messages
    from mua.gym import AgentAction

    tasks = GYM.build_tasks(str(tau2_checkout), 0, {"domain": "retail"})["base"]
    task = next(t for t in tasks if t.payload["task"]["evaluation_criteria"].get("nl_assertions"))
    assertions = task.payload["task"]["evaluation_criteria"]["nl_assertions"]
    answer = json.dumps({"results": [{"metExpectation": True} for _ in assertions]})
    judge = _Endpoint()
    judge_client = SimpleNamespace(
        endpoint=judge, cfg=SimpleNamespace(temperature=0.0, max_tokens=None)
    )
    monkeypatch.setattr(Tau2Env, "_judge", lambda self: judge_client)

    async def reply(messages, parse=None, **kwargs):
        judge.requests.append({"messages": messages, **kwargs})
        message = SimpleNamespace(content=answer, tool_calls=None)
        return message, parse(message)

    judge.chat = reply
    options = {"data_dir": str(tau2_checkout), "profile": "leaderboard", "judge": "user"}
    env = GYM.make_env(GymContext(options=options))
    asyncio.run(env.reset(task))
    result = asyncio.run(env.step(AgentAction(text="All done. ###STOP###")))
    assert result.done and result.info["termination"] == "agent_stop"
    source = Tau2Source(find_checkout(tau2_checkout))
    assert judge.requests[0]["messages"] == judge_messages(source, env.transcript, assertions)
    assert judge.requests[0]["temperature"] == 0.0
    assert result.info["reward_info"]["nl_assertions"] == [True] * len(assertions)
    assert result.info["tau2_checkout"] == {"version": "1.0.1", "commit": None}


def _played_rows(checkout: Path, domain: str, count: int) -> list[dict]:
    """Result rows of expert conversations with the scripted user, as `mua eval` saves them."""
    from gyms.tau2.expert import expert_message
    from mua.gym import AgentAction, ToolCall

    async def play(task):
        env = GYM.make_env(GymContext(options={"data_dir": str(checkout), "basis": "no_nl"}))
        messages = list((await env.reset(task)).messages)
        for _ in range(40):
            message = expert_message(messages, task)
            messages.append(message)
            calls = [
                ToolCall(c["function"]["name"], c["function"]["arguments"])
                for c in message.get("tool_calls") or []
            ]
            result = await env.step(
                AgentAction(text=message.get("content") or "", tool_calls=calls)
            )
            messages.extend(result.messages)
            if result.done:
                return result, messages
        raise AssertionError("episode did not end")

    rows = []
    for task in GYM.build_tasks(str(checkout), 0, {"domain": domain})["base"][:count]:
        result, messages = asyncio.run(play(task))
        rows.append(
            {
                "gym": "tau2",
                "task_id": task.task_id,
                "sample_index": 0,
                "reward": result.reward,
                "excluded": False,
                "termination": "done",
                "reward_components": result.components,
                "messages": messages,
            }
        )
    return rows


def test_rescore_regrades_with_current_task_definitions(tau2_checkout, tmp_path):  # noqa: F811
    folder = tmp_path / "eval"
    folder.mkdir()
    rows = _played_rows(tau2_checkout, "airline", 3)
    assert [r["reward"] for r in rows] == [1.0, 1.0, 1.0]
    (folder / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    config = {"gym_options": {"tau2": {"data_dir": str(tau2_checkout), "basis": "no_nl"}}}
    (folder / "eval_config.json").write_text(json.dumps({**config, "user": {"kind": "scripted"}}))
    out = _report_args("--rescore", str(folder))
    assert "rescored 3 conversations with the current task definitions (0 rewards changed" in out
    # the task definitions change: the first task's gold actions now book another flight
    edited = tmp_path / "edited"
    (edited / "data" / "tau2" / "domains").mkdir(parents=True)
    (edited / "src").symlink_to((tau2_checkout / "src").resolve())
    (edited / "pyproject.toml").symlink_to((tau2_checkout / "pyproject.toml").resolve())
    real = (tau2_checkout / "data" / "tau2").resolve()
    for item in real.iterdir():
        if item.name != "domains":
            (edited / "data" / "tau2" / item.name).symlink_to(item)
    for item in (real / "domains").iterdir():
        if item.name != "airline":
            (edited / "data" / "tau2" / "domains" / item.name).symlink_to(item)
    shutil.copytree(real / "domains" / "airline", edited / "data" / "tau2" / "domains" / "airline")
    tasks_file = edited / "data" / "tau2" / "domains" / "airline" / "tasks.json"
    tasks = json.loads(tasks_file.read_text())
    first = next(t for t in tasks if f"tau2-airline-{t['id']}" == rows[0]["task_id"])
    first["evaluation_criteria"]["communicate_info"] = ["a fact the agent never said"]
    first["evaluation_criteria"]["reward_basis"] = ["DB", "COMMUNICATE"]
    tasks_file.write_text(json.dumps(tasks))
    out = _report_args("--rescore", "--data", str(edited), str(folder))
    assert "rescored 3 conversations with the current task definitions (1 rewards changed" in out
    rescored = [json.loads(x) for x in (folder / "results_rescored.jsonl").read_text().splitlines()]
    assert [r["reward"] for r in rescored] == [0.0, 1.0, 1.0]
    assert rescored[0]["reward_components"]["communicate"] == 0.0
    assert [
        json.loads(x)["reward"] for x in (folder / "results.jsonl").read_text().splitlines()
    ] == [1.0] * 3


def test_rescore_finds_labelled_rows(tau2_checkout):  # noqa: F811
    from gyms.tau2.rescore import rescore_rows

    rows = [{**r, "gym": "tau2_airline"} for r in _played_rows(tau2_checkout, "airline", 2)]
    _, counts = rescore_rows(rows, tau2_checkout / "data")
    assert counts == {"rescored": 2, "changed": 0, "kept": 0}


def _report_args(*args: str) -> str:
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "gyms.tau2.report", *args], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_profile_ends_at_tau2s_max_steps(tau2_checkout, tmp_path):  # noqa: F811
    """The step limit is the checkout's DEFAULT_MAX_STEPS (set to 6 in a copy here)."""
    from mua.gym import AgentAction, ToolCall

    copy = tmp_path / "six-steps"
    (copy / "src" / "tau2").mkdir(parents=True)
    for item in (tau2_checkout / "src" / "tau2").resolve().iterdir():
        if item.name != "config.py":
            (copy / "src" / "tau2" / item.name).symlink_to(item)
    config = (tau2_checkout / "src" / "tau2" / "config.py").read_text()
    assert "DEFAULT_MAX_STEPS = 200" in config
    (copy / "src" / "tau2" / "config.py").write_text(
        config.replace("DEFAULT_MAX_STEPS = 200", "DEFAULT_MAX_STEPS = 6")
    )
    (copy / "pyproject.toml").symlink_to((tau2_checkout / "pyproject.toml").resolve())
    (copy / "data").symlink_to((tau2_checkout / "data").resolve())
    options = {"data_dir": str(copy), "profile": "leaderboard", "basis": "no_nl"}
    task = GYM.build_tasks(str(copy), 0, {"domain": "airline"})["base"][0]
    env = GYM.make_env(GymContext(options=options))
    asyncio.run(env.reset(task))  # the user's first message: step 1
    call = AgentAction(text="", tool_calls=[ToolCall("get_user_details", {"user_id": "nobody"})])
    ends = [asyncio.run(env.step(call)) for _ in range(3)]  # each call and its result: 2 steps
    assert [r.done for r in ends] == [False, False, True]
    assert ends[-1].info["termination"] == "max_steps" and ends[-1].reward == 0.0


def test_profile_runs_every_call_of_a_message(tau2_checkout):  # noqa: F811
    """tau2 runs all the tool calls of an agent message; `profile: mua` runs the first only."""
    from mua.gym import AgentAction, ToolCall

    task = GYM.build_tasks(str(tau2_checkout), 0, {"domain": "airline"})["base"][0]
    calls = [
        ToolCall("get_user_details", {"user_id": "nobody"}),
        ToolCall("get_reservation_details", {"reservation_id": "NONE00"}),
    ]
    outcomes = {}
    for profile in ("leaderboard", "mua"):
        options = {"data_dir": str(tau2_checkout), "profile": profile, "basis": "no_nl"}
        env = GYM.make_env(GymContext(options=options))
        asyncio.run(env.reset(task))
        result = asyncio.run(env.step(AgentAction(text="", tool_calls=calls)))
        outcomes[profile] = (result, [c["name"] for c in env.calls])
    every, names = outcomes["leaderboard"]
    assert [m["name"] for m in every.messages] == ["get_user_details", "get_reservation_details"]
    assert names == ["get_user_details", "get_reservation_details"]
    assert every.info["errors"] == {"tool_error": 2}
    first, names = outcomes["mua"]
    assert [m["name"] for m in first.messages] == ["get_user_details"]
    assert names == ["get_user_details"]
    assert first.info["errors"] == {"ignored_tool_calls": 1, "tool_error": 1}
