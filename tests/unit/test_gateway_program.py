"""Program gyms through `collect`: the example `openai`-SDK agent (a command and an entry point)
played on guess tasks against a scripted engine, a trimming agent's splits becoming one training
sample each, and programs that crash, hang, print no reward or run out of turns."""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

import pytest

from mua.config.gyms import GymConfig, ProgramConfig
from mua.config.rollout import RolloutConfig
from mua.config.train import GRPOConfig
from mua.gym import GymContext, get_gym
from mua.gym.mix import GymRun
from mua.models import load_tokenizer
from mua.rollout.collect import run_rollouts
from mua.rollout.policies import EnginePolicy
from mua.run import driven
from mua.train.rl_batch import BatchReport, group_relative_advantages, keep_mask, score
from tests.fakes.scripted_engine import ScriptedEngine

REPO = Path(__file__).resolve().parents[2]
AGENT = [sys.executable, str(REPO / "examples" / "gateway_agents" / "guess_agent.py")]
ENV_AGENT = [sys.executable, str(REPO / "examples" / "gateway_agents" / "env_agent.py")]


def call(n: int) -> str:
    return f'<tool_call>\n{{"name": "guess", "arguments": {{"number": {n}}}}}\n</tool_call>'


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer("tiny:qwen2-1m")


def play(tokenizer, program: dict, replies, *, n=1, max_turns=6, concurrency=4, spec=None):
    """The trajectories of one guess task (target in the payload) played by `program` (in
    `spec`'s env when given, else the guess gym's)."""
    spec = spec or get_gym("guess")
    options = {"max_number": 8, "num_train": 1, "num_test": 0}
    task = get_gym("guess").build_tasks(None, seed=0, options=options)["train"][0]
    cfg = RolloutConfig(
        n=n, max_turns=max_turns, max_total_tokens=4096, max_new_tokens_per_turn=64,
        max_concurrency=concurrency,
    )  # fmt: skip
    entry = GymConfig(name="guess", program=ProgramConfig(**program))
    run = driven(GymRun("guess", spec, GymContext(), cfg, n, entry=entry))
    engine = ScriptedEngine(tokenizer, replies(task) if callable(replies) else replies)
    policy = EnginePolicy(engine, tool_parser="hermes")
    trajs = asyncio.run(
        run_rollouts([task], policy=policy, tokenizer=tokenizer, rollout_cfg=cfg, runs=[run])
    )
    return task, engine, trajs


def wrong(task) -> int:
    return 1 if task.payload["target"] != 1 else 2


def test_the_sdk_agent_is_trained_on_exactly_what_it_sampled(tokenizer):
    def replies(task):
        return [call(wrong(task)), call(task.payload["target"])]

    task, engine, [traj] = play(tokenizer, {"command": AGENT}, replies)
    assert traj.termination == "done" and traj.reward == 1.0
    assert traj.num_turns == 2 and traj.turn_rewards == [0.0, 1.0]
    assert traj.segments == [] and traj.metrics["gateway/splits"] == 0
    assert traj.token_ids == engine.prompts[-1] + engine.sampled[-1]
    trained = [t for t, m in zip(traj.token_ids, traj.loss_mask, strict=True) if m]
    assert trained == [t for s in engine.sampled for t in s]
    assert [m["role"] for m in traj.messages] == [
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
    ]
    assert traj.messages[3]["content"] in ("higher", "lower")


def test_a_trimming_agent_splits_and_each_split_is_a_training_sample(tokenizer):
    def replies(task):  # sample 0 (run first) misses four times, sample 1 finds it at once
        return [call(wrong(task))] * 4 + [call(task.payload["target"])]

    program = {"command": AGENT, "env": {"GUESS_AGENT_TRIM": "1"}}
    task, engine, trajs = play(tokenizer, program, replies, n=2, concurrency=1)
    trimmed, direct = trajs
    assert trimmed.reward == 0.0 and direct.reward == 1.0
    assert trimmed.metrics["gateway/splits"] == 3 and len(trimmed.segments) == 4
    assert sum(trimmed.segments) == len(trimmed.token_ids)
    algo = GRPOConfig()
    batch = score(trajs, algo, rank=0, world_size=1, n=2)
    assert len(batch.samples) == 5  # four samples of the trimmed session, one of the other
    for sample, prompt, sampled in zip(batch.samples, engine.prompts, engine.sampled, strict=True):
        assert sample.token_ids == prompt + sampled
        assert sum(sample.loss_mask) == len(sampled)
    tokens, per_traj = group_relative_advantages(batch, algo)
    assert per_traj[0] < 0 < per_traj[1]
    for sample, adv in zip(batch.samples, tokens, strict=True):
        assert len(adv) == len(sample.token_ids)
        trained = {a for a, m in zip(adv.tolist(), sample.loss_mask, strict=True) if m}
        assert len(trained) == 1 and (trained.pop() < 0) == (sample is not batch.samples[-1])


def test_the_agent_as_an_entry_point_scored_by_the_gym(tokenizer):
    def replies(task):
        return [call(task.payload["target"])]

    program = {"entry_point": "examples.gateway_agents.guess_agent:play", "reward": "gym"}
    _, _, [traj] = play(tokenizer, program, replies)
    assert traj.termination == "done" and traj.reward == 1.0


def _scorer_bug(messages, task, ctx):
    raise RuntimeError("scorer bug")


@pytest.mark.parametrize(
    ("scorer", "said"),
    [
        (_scorer_bug, "score_conversation raised RuntimeError: scorer bug"),
        (lambda m, t, c: None, "score_conversation returned None, not a finite number"),
        (lambda m, t, c: float("nan"), "score_conversation returned nan, not a finite number"),
    ],
)
def test_a_gym_scorer_that_fails_is_a_masked_env_error(tokenizer, scorer, said):
    import dataclasses

    spec = dataclasses.replace(get_gym("guess"), score_conversation=scorer)
    program = {"entry_point": "examples.gateway_agents.guess_agent:play", "reward": "gym"}
    _, _, [traj] = play(tokenizer, program, lambda task: [call(task.payload["target"])], spec=spec)
    assert traj.termination == "env_error" and traj.detail == said
    assert traj.reward == 0.0 and traj.num_turns == 1
    assert keep_mask([traj], GRPOConfig(), BatchReport()) == [False]


def _script(tmp_path, body: str) -> list[str]:
    path = tmp_path / "agent.py"
    path.write_text(body)
    return [sys.executable, str(path)]


@pytest.mark.parametrize(
    ("body", "termination", "said"),
    [
        ("import sys\nsys.stderr.write('boom: the agent broke\\n')\nsys.exit(3)\n", "env_error",
         "status 3"),
        ("print('all done, no reward')\n", "env_error", "no reward line"),
    ],
)  # fmt: skip
def test_a_failing_program_is_a_masked_failure_with_its_stderr(
    tmp_path, tokenizer, body, termination, said
):
    _, _, [traj] = play(tokenizer, {"command": _script(tmp_path, body)}, ["unused"])
    assert traj.termination == termination and said in traj.detail
    assert traj.reward == 0.0 and traj.token_ids == []
    if "boom" in body:
        assert "boom: the agent broke" in traj.messages[-1]["content"]
    # a crash is counted under the entry's label, so a stop for env errors names the program
    crashed = {k: v for k, v in traj.metrics.items() if k.startswith("gateway/program_crashed/")}
    assert crashed == ({"gateway/program_crashed/guess": 1.0} if "boom" in body else {})
    assert keep_mask([traj], GRPOConfig(), BatchReport()) == [False]


def test_a_run_stopped_for_env_errors_names_the_crashing_program():
    from mua.config.train import StopConfig
    from mua.train.guards import RunStopped, StepWatch

    metrics = {
        "termination/done": 1.0,
        "termination/env_error": 5.0,
        "gateway/program_crashed/langgraph": 4.0,
    }
    with pytest.raises(RunStopped) as stopped:
        StepWatch(StopConfig(env_error_rate=0.5), show=False).after_step(3, metrics)
    said = str(stopped.value)
    assert "the agent program of gyms entry 'langgraph' (4 runs) crashed" in said
    assert "in the other 1 the gym's tools or data fail" in said
    del metrics["gateway/program_crashed/langgraph"]
    with pytest.raises(RunStopped, match="the gym's tools or data fail, see the transcripts"):
        StepWatch(StopConfig(env_error_rate=0.5), show=False).after_step(3, metrics)


ENV_CHECK = """
import json, os, sys, urllib.request
env = os.environ
want = {
    "ANTHROPIC_API_KEY": env["OPENAI_API_KEY"],
    "ANTHROPIC_BASE_URL": env["OPENAI_BASE_URL"].removesuffix("/v1"),
    "OPENAI_AGENTS_DISABLE_TRACING": "1",
    "OPENAI_DEFAULT_MODEL": "mine",
}
wrong = {k: env.get(k) for k, v in want.items() if env.get(k) != v}
if wrong:
    sys.exit(f"wrong variables: {wrong}")
body = {"model": env["MUA_MODEL"], "max_tokens": 8, "messages": [{"role": "user", "content": "Hi"}]}
request = urllib.request.Request(
    env["ANTHROPIC_BASE_URL"] + "/v1/messages", json.dumps(body).encode(),
    {"x-api-key": env["ANTHROPIC_API_KEY"], "content-type": "application/json"},
)
reply = json.loads(urllib.request.urlopen(request).read())
print(json.dumps({"reward": 1.0 if reply["content"][0]["text"] == "hello" else 0.5}))
"""


def test_a_program_gets_both_sdks_variables_and_agents_sdk_tracing_off(tmp_path, tokenizer):
    program = {"command": _script(tmp_path, ENV_CHECK), "env": {"OPENAI_DEFAULT_MODEL": "mine"}}
    _, engine, [traj] = play(tokenizer, program, ["hello"])
    assert traj.termination == "done", traj.detail
    assert traj.reward == 1.0 and traj.metrics["gateway/api_requests/messages"] == 1
    assert [t for t, m in zip(traj.token_ids, traj.loss_mask, strict=True) if m] == engine.sampled[
        0
    ]


def test_a_hanging_program_is_killed_at_its_deadline(tmp_path, tokenizer):
    body = "import sys, time\nsys.stderr.write('thinking forever\\n')\nsys.stderr.flush()\ntime.sleep(60)\n"
    start = time.monotonic()
    _, _, [traj] = play(tokenizer, {"command": _script(tmp_path, body), "timeout_s": 1}, ["x"])
    assert time.monotonic() - start < 20
    assert traj.termination == "timeout" and "deadline" in traj.detail
    assert "thinking forever" in traj.messages[-1]["content"]


def test_a_program_refused_past_its_turns_is_truncated_not_failed(tokenizer):
    def replies(task):
        return [call(wrong(task))] * 4

    _, _, [traj] = play(tokenizer, {"command": AGENT}, replies, max_turns=2)
    assert traj.termination == "max_turns" and traj.num_turns == 2 and traj.reward == 0.0


def test_an_engine_failure_stops_the_run(tokenizer):
    def broken(task):
        def reply(prompt):
            raise RuntimeError("engine on fire")

        return reply

    with pytest.raises(RuntimeError, match="engine on fire"):
        play(tokenizer, {"command": AGENT}, broken)


@pytest.mark.parametrize(
    ("program", "said"),
    [
        ({}, "exactly one of command"),
        ({"command": ["x"], "entry_point": "a:b"}, "exactly one of command"),
        ({"entry_point": "no_colon"}, "module:function"),
    ],
)
def test_a_program_section_is_checked(program, said):
    with pytest.raises(ValueError, match=said):
        ProgramConfig(**program)


@pytest.mark.parametrize(
    ("extra", "program", "said"),
    [
        ({"algo": {"kind": "ppo"}}, {"command": AGENT}, "train with GRPO"),
        ({}, {"command": ["no-such-agent-binary"]}, "'no-such-agent-binary' not found"),
        ({}, {"entry_point": "no_such_module_here:play"}, "cannot be imported"),
    ],
)
def test_a_program_gym_that_cannot_run_is_refused_before_training(tmp_path, extra, program, said):
    import yaml

    from mua.config import load_recipe
    from mua.errors import UsageError
    from mua.gym.mix import check_gyms

    path = tmp_path / "train.yaml"
    body = {"verb": "train", "gyms": [{"name": "guess", "program": program}], **extra}
    path.write_text(yaml.safe_dump(body))
    with pytest.raises(UsageError) as err:
        check_gyms(load_recipe(str(path)), "train")
    assert said in str(err.value) and "gyms[0] (guess)" in str(err.value)
    assert "\n" not in str(err.value)


def test_a_generic_agent_plays_the_gyms_own_env_and_is_rewarded_by_it(tokenizer):
    def replies(task):
        return [f"[answer] {wrong(task)}", f"[answer] {task.payload['target']}"]

    task, engine, [traj] = play(tokenizer, {"command": ENV_AGENT, "reward": "env"}, replies)
    assert traj.termination == "done" and traj.reward == 1.0 and traj.num_turns == 2
    said = [m["content"] for m in traj.messages if m["role"] == "user"]
    assert said[0] == task.prompt[-1]["content"] and said[1] in ("higher", "lower")
    assert traj.token_ids == engine.prompts[-1] + engine.sampled[-1]


class _BrokenEnv:
    async def reset(self, task):
        from mua.gym import ResetResult

        return ResetResult(messages=[{"role": "user", "content": "go"}])

    async def step(self, action):
        raise RuntimeError("the tool server is down")

    async def close(self):
        return None


def test_an_env_that_fails_under_a_program_ends_it_as_env_error(tokenizer):
    from mua.gym import GymSpec

    spec = GymSpec(name="broken", description="", make_env=lambda ctx: _BrokenEnv(),
                   build_tasks=lambda *a, **k: {})  # fmt: skip
    _, _, [traj] = play(tokenizer, {"command": ENV_AGENT, "reward": "env"}, ["hi"], spec=spec)
    assert traj.termination == "env_error" and "the tool server is down" in traj.detail


def test_mua_eval_runs_the_entrys_program(tokenizer):
    from mua.eval.eval_runner import evaluate

    spec = get_gym("guess")
    options = {"max_number": 8, "num_train": 0, "num_test": 1}
    task = spec.build_tasks(None, seed=0, options=options)["test"][0]
    cfg = RolloutConfig(max_turns=4, max_total_tokens=2048, max_new_tokens_per_turn=64)
    engine = ScriptedEngine(tokenizer, [call(task.payload["target"])])
    entry = GymConfig(name="guess", program=ProgramConfig(command=AGENT))
    result = asyncio.run(
        evaluate(
            [task], policy=EnginePolicy(engine, tool_parser="hermes"), gym_spec=spec,
            gym_ctx=GymContext(), tokenizer=tokenizer, rollout_cfg=cfg, entry=entry,
        )
    )  # fmt: skip
    [row] = result.rows
    assert row["reward"] == 1.0 and row["termination"] == "done"
    assert row["messages"][-1]["role"] == "assistant" and "tool_calls" in row["messages"][-1]
    assert len(engine.prompts) == 1  # the program asked the model, not the built-in loop
