"""The openenv gym against a real OpenEnv server (openenv 0.10.0, tests/gyms/openenv_guess_server.py)
through OpenEnv's own client, both in the side venv `make openenv-side` builds: reset with the
task payload, actions from text and tool calls, reward and done, and every fault ending its
trajectory as env_error (masked)."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import time
from pathlib import Path

import pytest

from gyms.openenv.client import OpenEnvFault, close_bridges
from gyms.openenv.env import OpenEnvEnv
from mua.errors import UsageError
from mua.gym import AgentAction, GymContext, Task, ToolCall, get_gym
from tests.conftest import free_port
from tests.integration.byo_helpers import play_actions

REPO = Path(__file__).resolve().parents[2]
SIDE_PYTHON = REPO / "tests" / ".openenv" / "venv" / "bin" / "python"
TASK = Task("t0", "openenv", "train", [{"role": "user", "content": "Guess 1..4."}], {"target": 3})

pytestmark = pytest.mark.skipif(
    not SIDE_PYTHON.exists(), reason="needs the OpenEnv side venv: make openenv-side"
)


def start_server() -> tuple[subprocess.Popen, str]:
    """The test OpenEnv server on a free port, once it accepts connections."""
    port = free_port()
    proc = subprocess.Popen(
        [str(SIDE_PYTHON), "tests/gyms/openenv_guess_server.py", str(port)],
        cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    deadline = time.monotonic() + 120
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc, f"http://127.0.0.1:{port}"
        except OSError:
            assert proc.poll() is None and time.monotonic() < deadline, "no OpenEnv server"
            time.sleep(0.3)


@pytest.fixture(scope="module")
def server():
    proc, url = start_server()
    yield url
    proc.kill()
    proc.wait()


@pytest.fixture(autouse=True)
def _fresh_bridges():
    close_bridges()
    yield
    close_bridges()


def options(url: str, **over) -> dict:
    return {"url": url, "python": str(SIDE_PYTHON), "observation_field": "feedback", **over}


def say(text: str) -> AgentAction:
    return AgentAction(text=text)


def episode(opts: dict, actions: list[AgentAction], task: Task = TASK):
    async def play():
        env = OpenEnvEnv(GymContext(options=opts))
        try:
            return await play_actions(env, task, actions)
        finally:
            await env.close()

    return asyncio.run(play())


def test_reset_with_the_payload_and_play_with_text_and_tool_calls(server):
    call = AgentAction(text="", tool_calls=[ToolCall("step", {"message": "3"})])
    reset, steps = episode(options(server), [say("[answer] 1"), say("four"), call])
    assert reset.messages == [*TASK.prompt, {"role": "user", "content": "Your guess?"}]
    assert [(s.messages[0]["content"], s.reward, s.done) for s in steps] == [
        ("higher", 0.0, False),
        ("Give a number.", 0.0, False),
        ("Correct!", 1.0, True),
    ]
    _, steps = episode({**options(server), "observation_field": None}, [say("2")])
    assert steps[0].messages[0]["content"] == '{"feedback": "higher"}'


def test_concurrent_episodes_have_sessions_of_their_own(server):
    async def both():
        envs = [OpenEnvEnv(GymContext(options=options(server))) for _ in range(2)]
        tasks = [Task(f"t{t}", "openenv", "train", TASK.prompt, {"target": t}) for t in (1, 4)]
        await asyncio.gather(*(e.reset(t) for e, t in zip(envs, tasks)))
        steps = await asyncio.gather(*(e.step(say("1")) for e in envs))
        await asyncio.gather(*(e.close() for e in envs))
        return [s.messages[0]["content"] for s in steps]

    assert asyncio.run(both()) == ["Correct!", "higher"]


def test_a_hang_and_an_oversized_observation_are_faults(server):
    with pytest.raises(OpenEnvFault, match="OpenEnv step at .* gave no answer within 2s"):
        episode(options(server, timeout_s=2), [say("hang")])
    with pytest.raises(OpenEnvFault, match="observation of 100000 characters, over"):
        episode(options(server), [say("flood")])
    assert episode(options(server), [say("3")])[1][0].reward == 1.0  # a fresh client


def test_a_server_that_dies_is_a_fault_and_the_trajectory_env_error():
    from mua.config.rollout import RolloutConfig
    from mua.models import load_tokenizer
    from mua.rollout.collect import run_rollouts
    from mua.rollout.policies import MessagePolicy

    proc, url = start_server()
    try:

        async def act(messages, task):
            return {"role": "assistant", "content": "crash"}

        (traj,) = asyncio.run(
            run_rollouts(
                [TASK], n=1, policy=MessagePolicy(act), gym_spec=get_gym("openenv"),
                gym_ctx=GymContext(options=options(url, timeout_s=10)),
                tokenizer=load_tokenizer("tiny:qwen2-1m"),
                rollout_cfg=RolloutConfig(n=1, max_total_tokens=1024, max_turns=2),
            )
        )  # fmt: skip
        assert traj.termination == "env_error"
        assert "OpenEnvFault: OpenEnv step at" in traj.detail
        with pytest.raises(OpenEnvFault, match="OpenEnv reset at .* failed"):
            episode(options(url), [])
    finally:
        proc.kill()
        proc.wait()


def test_bad_options_and_a_missing_client_are_one_line():
    with pytest.raises(UsageError, match="gym.options.url: Field required"):
        OpenEnvEnv(GymContext(options={"python": str(SIDE_PYTHON)}))
    with pytest.raises(UsageError, match="gym.options.python: /no/python is not a Python"):
        OpenEnvEnv(GymContext(options={"url": "http://127.0.0.1:1", "python": "/no/python"}))
    with pytest.raises(
        OpenEnvFault,
        match=r"(?s)\(/usr/bin/python3\) exited with status 1; .* stderr ends: .*ModuleNotFound",
    ):
        episode(options("http://127.0.0.1:1", python="/usr/bin/python3"), [])
