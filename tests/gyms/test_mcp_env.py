"""The mcp gym against a real MCP server written with the mcp SDK (tests/gyms/mcp_guess_server.py),
over stdio and streamable HTTP: the tools offered, the calls, the users, the three reward
sources, and every server fault ending its trajectory as env_error (masked) with the server's
stderr tail, the next episode getting a fresh server."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gyms.mcp.env import McpEnv
from gyms.mcp.hub import McpFault, close_hub, hub
from mua.errors import UsageError
from mua.gym import AgentAction, GymContext, Task, ToolCall, get_gym
from tests.conftest import free_port
from tests.integration.byo_helpers import play_actions

REPO = Path(__file__).resolve().parents[2]
SERVER = "python tests/gyms/mcp_guess_server.py"
TASK = Task("t0", "mcp", "train", [{"role": "user", "content": "Guess 1..4."}], {"target": 3})


def options(**over) -> dict:
    server = {"name": "guess", "command": SERVER, "call_timeout_s": 3, **over.pop("server", {})}
    return {
        "servers": [server],
        "reward": {"kind": "tool", "name": "judge"},
        "task_args": ["target"],
        **over,
    }


@pytest.fixture(autouse=True)
def _fresh_hub():
    close_hub()
    yield
    close_hub()


def guess(n: int | str) -> AgentAction:
    call = ToolCall("interact_with_env", {"choice": "answer", "content": str(n)})
    return AgentAction(text=f"[answer] {n}", tool_calls=[call])


def call(name: str, **args) -> AgentAction:
    return AgentAction(text="", tool_calls=[ToolCall(name, args)])


def episode(opts: dict, actions: list[AgentAction], task: Task = TASK, **ctx):
    async def play():
        env = McpEnv(GymContext(options=opts, **ctx))
        return (*await play_actions(env, task, actions), env)

    return asyncio.run(play())


def test_tools_are_offered_with_task_args_hidden_and_the_judge_left_out():
    reset, steps, _ = episode(options(), [guess(2), guess(3)])
    names = [t["function"]["name"] for t in reset.tools]
    assert names == ["interact_with_env", "crash", "hang", "flood"]
    assert reset.tools[0]["function"]["parameters"] == {
        "type": "object",
        "properties": {"choice": {"type": "string"}, "content": {"default": "", "type": "string"}},
        "required": ["choice"],
    }
    assert reset.messages == TASK.prompt
    assert [s.messages for s in steps] == [
        [{"role": "tool", "name": "interact_with_env", "content": "higher"}],
        [{"role": "tool", "name": "interact_with_env", "content": "Correct!"}],
    ]
    assert [(s.reward, s.done) for s in steps] == [(0.0, False), (1.0, True)]


def test_a_server_tools_list_limits_what_is_offered_and_mistakes_are_tool_messages():
    opts = options(server={"tools": ["interact_with_env", "judge"]})
    actions = [call("crash"), call("interact_with_env", choice=5), guess(1)]
    reset, steps, _ = episode(opts, actions)
    assert [t["function"]["name"] for t in reset.tools] == ["interact_with_env"]
    assert steps[0].messages[0]["content"] == (
        "Error: unknown tool 'crash'. Available tools: interact_with_env."
    )
    assert steps[0].info == {"errors": {"unknown_tool": 1}}
    assert "5 is not of type 'string'" in steps[1].messages[0]["content"]
    assert steps[1].info == {"errors": {"bad_arguments": 1}}
    assert steps[2].messages[0]["content"] == "higher" and not steps[2].done


def test_episodes_share_one_server_per_process():
    episode(options(), [guess(1)])
    first = [c.client for c in hub().conns.values()]
    episode(options(), [guess(2)])
    assert [c.client for c in hub().conns.values()] == first and len(first) == 1


def test_streamable_http_server_and_a_dead_one(tmp_path):
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "tests/gyms/mcp_guess_server.py", "--http", str(port)],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        url = f"http://127.0.0.1:{port}/mcp"
        opts = options(servers=[{"name": "web", "url": url, "start_timeout_s": 5}])
        deadline = time.monotonic() + 30
        while True:
            try:
                _, steps, _ = episode(opts, [guess(4), guess(3)])
                break
            except McpFault:
                assert time.monotonic() < deadline, "the HTTP server did not come up"
                close_hub()
                time.sleep(0.5)
        assert [s.messages[0]["content"] for s in steps] == ["lower", "Correct!"]
        assert steps[-1].reward == 1.0
        # a result over 1 MiB comes whole over HTTP (mcp 2.0.0 caps request bodies at 4 MiB,
        # not one streamed event); `max_result_chars` is what bounds it
        big = options(servers=[{**opts["servers"][0], "max_result_chars": 3_000_000}])
        _, steps, _ = episode(big, [call("flood", size=2_000_000)])
        assert steps[0].messages[0]["content"] == "x" * 2_000_000
        with pytest.raises(McpFault, match="returned 2000000 characters, over max_result_chars="):
            episode(opts, [call("flood", size=2_000_000)])
    finally:
        proc.kill()
        proc.wait()
    with pytest.raises(McpFault, match="MCP server web"):
        episode(opts, [guess(1)])


FAULTS = {
    "crash": (call("crash"), "tool crash failed: MCPError: Connection closed; its stderr ends: "),
    "hang": (call("hang"), "tool hang gave no answer within call_timeout_s=3s"),
    "flood": (call("flood", size=20000), "returned 20000 characters, over max_result_chars=16384"),
}


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_a_server_fault_raises_with_its_stderr_and_the_next_episode_gets_a_fresh_server(fault):
    action, message = FAULTS[fault]
    episode(options(), [guess(1)])
    before = [c.client for c in hub().conns.values()]
    start = time.monotonic()
    with pytest.raises(McpFault) as err:
        episode(options(), [action])
    assert message in str(err.value)
    assert time.monotonic() - start < 6.5  # the trajectory does not wait for the server's kill
    if fault == "crash":
        assert str(err.value).endswith("crashing on purpose")
    if fault == "hang":
        assert "hanging on purpose" in str(err.value)
    _, steps, _ = episode(options(), [guess(3)])
    assert steps[0].reward == 1.0
    after = [c.client for c in hub().conns.values()]
    assert (after == before) == (fault == "flood")  # crashed and hung servers were replaced


def test_a_bad_input_schema_is_a_fault_naming_the_tool():
    opts = options(server={"command": f"{SERVER} --bad-schema"})
    with pytest.raises(McpFault, match=r"tool 'interact_with_env' has a bad input schema: "):
        episode(opts, [guess(1)])


def test_a_server_that_cannot_start_is_a_fault_with_its_stderr():
    opts = options(server={"command": "python -c 'import sys; sys.exit(\"no such thing\")'"})
    with pytest.raises(McpFault, match=r"could not be opened: .*its stderr ends: no such thing"):
        episode(opts, [guess(1)])


def _rollout(opts: dict, text: str, max_turns: int = 2):
    from mua.config.rollout import RolloutConfig
    from mua.models import load_tokenizer
    from mua.rollout.collect import run_rollouts
    from mua.rollout.policies import MessagePolicy

    async def act(messages, task):
        return {"role": "assistant", "content": text}

    cfg = RolloutConfig(n=1, max_total_tokens=1024, max_turns=max_turns, max_concurrency=1)
    (traj,) = asyncio.run(
        run_rollouts(
            [TASK],
            n=1,
            policy=MessagePolicy(act, tool_parser="hermes"),
            gym_spec=get_gym("mcp"),
            gym_ctx=GymContext(options=opts),
            tokenizer=load_tokenizer("tiny:qwen2-1m"),
            rollout_cfg=cfg,
        )
    )
    return traj


def _calling(name: str, args: dict) -> str:
    return f'<tool_call>{{"name": "{name}", "arguments": {json.dumps(args)}}}</tool_call>'


@pytest.mark.parametrize("fault", ["crash", "hang", "flood", "bad_schema"])
def test_a_fault_ends_the_trajectory_as_env_error_not_a_zero(fault):
    opts = (
        options(server={"command": f"{SERVER} --bad-schema"})
        if fault == "bad_schema"
        else options()
    )
    name, args = {
        "flood": ("flood", {"size": 20000}),
        "bad_schema": ("interact_with_env", {"choice": "answer", "content": "1"}),
    }.get(fault, (fault, {}))
    traj = _rollout(opts, _calling(name, args))
    assert traj.termination == "env_error"
    assert "McpFault" in traj.detail and "MCP server guess" in traj.detail


def test_a_played_trajectory_is_scored_by_the_judge_at_the_turn_limit():
    traj = _rollout(options(), _calling("interact_with_env", {"choice": "answer", "content": "3"}))
    assert traj.termination == "done" and sum(traj.turn_rewards) == 1.0
    traj = _rollout(options(), _calling("interact_with_env", {"choice": "answer", "content": "1"}))
    assert traj.termination == "max_turns" and traj.turn_rewards == [0.0, 0.0]


def test_the_gym_scorer_and_a_program_score_the_conversation(tmp_path):
    by_gym = options(reward={"kind": "gym", "name": "guess"})
    assert episode(by_gym, [guess(3)])[1][-1].reward == 1.0
    scorer = tmp_path / "score.py"
    scorer.write_text(
        "import json, sys\nd = json.load(sys.stdin)\n"
        "said = [m['content'] for m in d['messages'] if m['role'] == 'tool']\n"
        "print(json.dumps({'reward': 0.5 * said.count('Correct!') + d['task']['payload']['target']}))\n"
    )
    by_program = options(reward={"kind": "program", "command": f"python {scorer}"})
    assert episode(by_program, [guess(3)])[1][-1].reward == 3.5
    failing = options(reward={"kind": "program", "command": "python -c 'print(1)'"})
    with pytest.raises(McpFault, match=r'reward program printed no \{"reward": x\} line'):
        episode(failing, [guess(3)])


def test_the_scripted_user_answers_text_turns_from_the_payload():
    task = Task("t1", "mcp", "train", TASK.prompt, {"target": 3, "user_replies": ["try 3"]})
    say = AgentAction(text="which number?")
    _, steps, _ = episode(options(), [say, say], task=task)
    assert [(s.messages, s.done) for s in steps] == [
        ([{"role": "user", "content": "try 3"}], False),
        ([], True),
    ]
    _, steps, _ = episode(options(end_on_text=True), [say], task=task)
    assert steps[0].done and steps[0].messages == []


class _User:
    """An LLM user's client: records what it was shown, answers from a list."""

    def __init__(self, *replies: str):
        self.replies, self.seen = list(replies), []

    async def complete(self, messages):
        self.seen.append(messages)
        return self.replies.pop(0)


def test_the_llm_user_gets_the_instructions_and_stops_the_episode():
    task = Task("t2", "mcp", "train", TASK.prompt, {"target": 3, "user_instructions": "Be brief."})
    user = _User("It is odd.", "Bye ###STOP###")
    say = AgentAction(text="a hint?")
    _, steps, _ = episode(options(), [say, say], task=task, user_kind="llm", llm=user)
    assert [(s.messages, s.done) for s in steps] == [
        ([{"role": "user", "content": "It is odd."}], False),
        ([{"role": "user", "content": "Bye"}], True),
    ]
    assert user.seen[0] == [
        {"role": "system", "content": "Be brief."},
        {"role": "assistant", "content": "Guess 1..4."},
        {"role": "user", "content": "a hint?"},
    ]
    with pytest.raises(UsageError, match="the LLM user needs payload.user_instructions"):
        episode(options(), [say], user_kind="llm", llm=_User("x"))


def test_bad_options_are_one_line_naming_the_key():
    with pytest.raises(
        UsageError, match=r"gym.options.servers.0: .*give exactly one of command or url"
    ):
        McpEnv(GymContext(options=options(server={"url": "http://127.0.0.1:1/mcp"})))
    with pytest.raises(UsageError, match=r"gym.options.reward"):
        McpEnv(GymContext(options=options(reward={"kind": "oracle"})))
    with pytest.raises(UsageError, match="gym turtle cannot score a conversation"):
        McpEnv(GymContext(options=options(reward={"kind": "gym", "name": "turtle"})))
    with pytest.raises(UsageError, match="no server offers the judge tool 'oracle'"):
        episode(options(reward={"kind": "tool", "name": "oracle"}), [])


def test_prep_reads_a_jsonl_of_tasks(tmp_path):
    source = tmp_path / "tasks.jsonl"
    rows = [
        {"prompt": "Guess 1..4.", "system": "Play.", "payload": {"target": 2}},
        {"id": "x", "prompt": [{"role": "user", "content": "Hi"}], "payload": {}, "split": "test"},
    ]
    source.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    splits = get_gym("mcp").build_tasks(str(source), 0, {})
    assert [t.task_id for t in splits["train"]] == ["mcp-train-0000"]
    assert splits["train"][0].prompt == [
        {"role": "system", "content": "Play."},
        {"role": "user", "content": "Guess 1..4."},
    ]
    assert [t.task_id for t in splits["test"]] == ["x"]
    by_option = get_gym("mcp").build_tasks(None, 0, {**options(), "tasks": str(source)})
    assert {k: [t.to_row() for t in v] for k, v in by_option.items()} == {
        k: [t.to_row() for t in v] for k, v in splits.items()
    }
    source.write_text('{"prompt": 3}\n')
    with pytest.raises(UsageError, match="line 1: prompt must be a string or a list"):
        get_gym("mcp").build_tasks(str(source), 0, {})
    with pytest.raises(UsageError, match="no built-in tasks; give --source tasks.jsonl"):
        get_gym("mcp").build_tasks(None, 0, options())
    with pytest.raises(UsageError, match="nowhere.jsonl: no such tasks file"):
        get_gym("mcp").build_tasks(None, 0, {**options(), "tasks": "nowhere.jsonl"})


def test_servers_are_gone_after_the_hub_closes(tmp_path):
    pid_file = tmp_path / "pids"
    episode(options(server={"env": {"MCP_PID_FILE": str(pid_file)}}), [guess(1)])
    (pid,) = map(int, pid_file.read_text().split())
    os.kill(pid, 0)  # alive while the process holds it
    close_hub()
    deadline = time.monotonic() + 10
    while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not Path(f"/proc/{pid}").exists()
