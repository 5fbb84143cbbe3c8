"""The verifiers gym against a real verifiers 0.4.0 environment written in the test suite
(tests/gyms/verifiers_guess_env, a guess game whose env answers higher or lower and whose task
reward is 1 for the right number), run by its own Env, harness and rewards in the side venv
`make verifiers-side` builds: tasks from its taskset, reset and step, the reward, concurrent
episodes, and every fault ending its trajectory as env_error (masked) with the stderr tail."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from gyms.verifiers import build_tasks
from gyms.verifiers.env import POOL, VerifiersEnv, VerifiersFault
from mua.errors import UsageError
from mua.gym import AgentAction, GymContext, Task, get_gym
from tests.integration.byo_helpers import play_actions

REPO = Path(__file__).resolve().parents[2]
SIDE_PYTHON = REPO / "tests" / ".verifiers" / "venv" / "bin" / "python"
PROMPT = "Guess my number from 1 to 4. Reply [answer] N. I say higher or lower."

pytestmark = pytest.mark.skipif(
    not SIDE_PYTHON.exists(), reason="needs the verifiers side venv: make verifiers-side"
)


def options(**over) -> dict:
    env_args = {"taskset": {"num_tasks": 6}, "max_guesses": 2}
    return {"env": "vf-guess", "python": str(SIDE_PYTHON), "env_args": env_args, **over}


@pytest.fixture(autouse=True)
def _fresh_bridges():
    POOL.close()
    yield
    POOL.close()


@pytest.fixture(scope="module")
def tasks() -> dict[str, list[Task]]:
    try:
        return build_tasks(None, 0, {**options(), "test_rows": 2})
    finally:
        POOL.close()


def say(text: str) -> AgentAction:
    return AgentAction(text=text)


def episode(opts: dict, task: Task, actions: list[AgentAction]):
    async def play():
        env = VerifiersEnv(GymContext(options=opts))
        try:
            return await play_actions(env, task, actions)
        finally:
            await env.close()

    return asyncio.run(play())


def test_the_taskset_rows_are_the_tasks(tasks):
    assert {k: len(v) for k, v in tasks.items()} == {"train": 4, "test": 2}
    first = tasks["train"][0]
    assert (first.task_id, first.gym, first.split) == ("vf-guess-guess-0", "verifiers", "train")
    assert first.prompt == [{"role": "user", "content": PROMPT}]
    assert first.payload["env"] == "vf-guess"
    assert [t.payload["data"]["target"] for t in tasks["train"] + tasks["test"]] == [
        4,
        4,
        1,
        3,
        4,
        4,
    ]


def test_the_environment_answers_each_turn_and_its_reward_ends_the_episode(tasks):
    task = tasks["train"][2]  # target 1
    reset, steps = episode(options(), task, [say("[answer] 3"), say("[answer] 1")])
    assert reset.messages == [{"role": "user", "content": PROMPT}] and reset.tools == []
    assert [(s.messages, s.reward, s.done) for s in steps] == [
        ([{"role": "user", "content": "lower"}], 0.0, False),
        ([], 1.0, True),
    ]
    assert steps[-1].components == {"correct": 1.0}
    _, steps = episode(options(), task, [say("[answer] 2"), say("[answer] 4")])
    assert [(s.reward, s.done) for s in steps] == [(0.0, False), (0.0, True)]
    _, steps = episode(options(), task, [say("1")])  # right at once: the env ends it
    assert [(s.reward, s.done, s.components) for s in steps] == [(1.0, True, {"correct": 1.0})]


def test_concurrent_episodes_have_sessions_of_their_own(tasks):
    async def both():
        envs = [VerifiersEnv(GymContext(options=options())) for _ in range(2)]
        pair = [tasks["train"][2], tasks["test"][0]]  # targets 1 and 4
        await asyncio.gather(*(e.reset(t) for e, t in zip(envs, pair)))
        steps = await asyncio.gather(*(e.step(say("1")) for e in envs))
        await asyncio.gather(*(e.close() for e in envs))
        return [(s.messages, s.done) for s in steps]

    assert asyncio.run(both()) == [([], True), ([{"role": "user", "content": "higher"}], False)]


def test_a_crash_an_exception_a_bad_reward_and_a_second_run_are_faults(tasks):
    task = tasks["train"][0]
    with pytest.raises(
        VerifiersFault, match=r"(?s)bridge exited; .*stderr ends: .*crashing as asked"
    ):
        episode(options(), task, [say("crash")])
    with pytest.raises(
        VerifiersFault, match=r"(?s)episode failed: .*RuntimeError: vf_guess: raising"
    ):
        episode(options(), task, [say("raise")])
    with pytest.raises(VerifiersFault, match=r"the rewards \{'correct': nan\} are not finite"):
        episode(options(), task, [say("nan"), say("1")])
    with pytest.raises(VerifiersFault, match="a second agent run asked the model; mua plays one"):
        episode(options(), task, [say("fork")])
    _, steps = episode(options(), task, [say("noise 4")])  # prints to stdout: harmless
    assert [(s.reward, s.done) for s in steps] == [(1.0, True)]


def test_a_hang_is_a_fault_and_the_next_episode_gets_a_fresh_bridge(tasks):
    task = tasks["train"][0]
    with pytest.raises(VerifiersFault, match="verifiers step of vf-guess gave no answer within 4s"):
        episode(options(timeout_s=4), task, [say("hang")])
    assert episode(options(), task, [say("4")])[1][0].reward == 1.0


def fake_bridge(folder: Path, answer: str) -> str:
    """A stand-in for the side Python whose bridge answers its first request with `answer`."""
    fake = folder / "python"
    fake.write_text(
        f"#!/bin/sh\necho '{{\"ready\": true}}'\nread line\necho '{answer}'\nexec sleep 30\n"
    )
    fake.chmod(0o755)
    return str(fake)


def test_a_bridge_that_writes_junk_or_bad_messages_is_a_fault(tmp_path, tasks):
    junk = options(python=fake_bridge(tmp_path, "junk"))
    with pytest.raises(
        VerifiersFault, match="bridge wrote a line that is not a JSON object: b'junk"
    ):
        episode(junk, tasks["train"][0], [])
    answer = '{"id": 0, "messages": [{"role": "assistant"}]}'
    bad = options(python=fake_bridge(tmp_path, answer), timeout_s=2)  # close: no answer in 2 s
    with pytest.raises(VerifiersFault, match="the environment's messages are not {role, content}"):
        episode(bad, tasks["train"][0], [])


def test_a_fault_ends_the_trajectory_as_env_error(tasks):
    from mua.config.rollout import RolloutConfig
    from mua.models import load_tokenizer
    from mua.rollout.collect import run_rollouts
    from mua.rollout.policies import MessagePolicy

    async def act(messages, task):
        return {"role": "assistant", "content": "crash"}

    (traj,) = asyncio.run(
        run_rollouts(
            [tasks["train"][0]], n=1, policy=MessagePolicy(act), gym_spec=get_gym("verifiers"),
            gym_ctx=GymContext(options=options()), tokenizer=load_tokenizer("tiny:qwen2-1m"),
            rollout_cfg=RolloutConfig(n=1, max_total_tokens=1024, max_turns=2),
        )
    )  # fmt: skip
    assert traj.termination == "env_error"
    assert "VerifiersFault: verifiers step of vf-guess" in traj.detail
    assert "crashing as asked" in traj.detail


def test_bad_options_and_tasks_of_another_env_are_one_line(tasks):
    with pytest.raises(UsageError, match="gym.options.env: Field required"):
        VerifiersEnv(GymContext(options={"python": str(SIDE_PYTHON)}))
    with pytest.raises(UsageError, match="gym.options.python: /no/python is not a Python"):
        VerifiersEnv(GymContext(options=options(python="/no/python")))
    with pytest.raises(UsageError, match="is not a task of the verifiers env 'other'"):
        episode(options(env="other"), tasks["train"][0], [])
    with pytest.raises(UsageError, match="drop --source"):
        build_tasks("x.jsonl", 0, options())
    with pytest.raises(
        UsageError,
        match=r"exited with status 1; .* stderr ends: cannot load the verifiers environment "
        r"'no-such-env': ModuleNotFoundError: taskset 'no-such-env' not found",
    ):
        build_tasks(None, 0, options(env="no-such-env"))
    with pytest.raises(
        VerifiersFault,
        match=r"(?s)\(/usr/bin/python3\) exited with status 1; .* stderr ends: .*ModuleNotFound",
    ):
        episode(options(python="/usr/bin/python3"), tasks["train"][0], [])
