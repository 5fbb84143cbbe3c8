"""The one door for conversations (`mua.rollout.collect`): one concurrency limit over every gym
(in-training validation of several gyms included), parking once `until` groups are complete, and
a failure cancelling the other conversations (`mua eval`'s runner included).

The envs count the conversations open at once: an env opens at its reset and closes when its
conversation ends, which is inside the concurrency limit.
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest
import torch

from mua.config.rollout import RolloutConfig
from mua.distributed import DistInfo
from mua.engines.engine_contract import GenerationResult
from mua.gym import GymContext, GymSpec, ResetResult, StepResult, Task
from mua.gym.mix import GymRun
from mua.models import load_tokenizer
from mua.rollout.collect import Group, SeedKey, collect

torch.set_num_threads(1)


class Counted:
    """Conversations in flight now and at most."""

    def __init__(self):
        self.now = self.most = self.started = 0

    def open(self):
        self.now += 1
        self.started += 1
        self.most = max(self.most, self.now)

    def close(self):
        self.now -= 1


def counting_gym(name: str, counted: Counted, turns: int = 2, fail_on: str | None = None):
    class Env:
        def __init__(self, ctx):
            self.turn = 0

        async def reset(self, task):
            counted.open()
            self.task = task
            return ResetResult(messages=[{"role": "user", "content": "guess"}])

        async def step(self, action):
            self.turn += 1
            await asyncio.sleep(0.01)
            if self.task.task_id == fail_on:
                from mua.errors import RunFailure

                raise RunFailure("the user endpoint refused the key")
            done = self.turn >= turns
            return StepResult(
                messages=[{"role": "user", "content": "again"}], reward=float(done), done=done
            )

        async def close(self):
            counted.close()

    return GymSpec(name=name, description="", make_env=Env, build_tasks=lambda *a, **k: {})


class Engine:
    """Answers every request with the same short turn, after a moment."""

    def __init__(self, tok):
        self.ids = tok.encode("[answer] 3", add_special_tokens=False)
        self.seeds = []

    async def generate(self, request):
        self.seeds.append(request.sampling.seed)
        await asyncio.sleep(0.005)
        ids = (self.ids + request.sampling.stop_token_ids[:1])[: request.sampling.max_new_tokens]
        return GenerationResult(token_ids=ids, logprobs=[-1.0] * len(ids), finish_reason="stop")


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer("tiny:qwen3-1m")


CFG = RolloutConfig(
    n=1, max_turns=3, max_new_tokens_per_turn=16, max_total_tokens=1024, max_concurrency=3
)


def tasks(prefix: str, count: int) -> list[Task]:
    return [
        Task(task_id=f"{prefix}{i}", gym=prefix, split="test", prompt=[], payload={})
        for i in range(count)
    ]


def test_validation_of_several_gyms_keeps_one_concurrency_limit(tok):
    """Three gyms, 5 held-out tasks each, n=2, rollout.max_concurrency=3: at most 3
    conversations are in flight over all gyms (one limit per gym would allow 9)."""
    from mua.rollout.policies import SeededPolicy
    from mua.train.rl_validation import validate

    counted = Counted()
    labels = ("a", "b", "c")
    runs = {
        label: GymRun(label, counting_gym(label, counted), GymContext(), CFG, 1) for label in labels
    }
    test_by_gym = {label: tasks(label, 5) for label in labels}
    engine = Engine(tok)

    class Sync:
        def run(self, job, timer=None):
            return asyncio.run(job())

    recipe = SimpleNamespace(
        rollout=CFG,
        model=SimpleNamespace(tool_parser="bracket"),
        data=SimpleNamespace(seed=0),
        track=SimpleNamespace(transcripts_per_step=0),
        eval=SimpleNamespace(n=2, k=[], temperature=1.0, success_threshold=1.0),
    )
    parts = SimpleNamespace(
        sync=SimpleNamespace(engine=engine, run=Sync().run),
        engine=engine,  # what the one-gym-era validation read
        policy=SeededPolicy.for_rollout(engine, CFG, "bracket", seed=0),
        runs=runs,
        test_by_gym=test_by_gym,
        test_tasks=[t for ts in test_by_gym.values() for t in ts],
        multi_gym=True,
    )
    dist = DistInfo(rank=0, world_size=1, local_rank=0, device=torch.device("cpu"), backend="gloo")
    tracker = SimpleNamespace(log_transcripts=lambda *a, **k: None)
    out = validate(
        recipe=recipe, dist=dist, parts=parts, state=SimpleNamespace(tokenizer=tok), tracker=tracker
    )
    assert counted.started == 3 * 5 * 2  # every conversation ran
    assert counted.most == CFG.max_concurrency  # the pool was full, and never over
    assert counted.now == 0
    assert out["val/reward_mean"] == 1.0 and "val/macro/reward_mean" in out


def test_until_parks_the_rest_and_a_second_call_finishes_them(tok):
    counted = Counted()
    fast = GymRun("fast", counting_gym("fast", counted, turns=1), GymContext(), CFG, 2)
    slow = GymRun("slow", counting_gym("slow", counted, turns=3), GymContext(), CFG, 2)
    groups = [Group(0, tasks("f", 1)[0], fast, SeedKey(1, 0))]
    groups += [Group(i, t, slow, SeedKey(1, i)) for i, t in enumerate(tasks("s", 2), start=1)]
    engine = Engine(tok)
    from mua.rollout.policies import EnginePolicy

    policy = EnginePolicy(engine, tool_parser="bracket")

    async def go():
        first = await collect(groups, 1, policy=policy, tokenizer=tok, max_concurrency=8)
        parked = sum(len(g.parked) for g in groups)
        second = await collect(groups, policy=policy, tokenizer=tok, max_concurrency=8, version=1)
        return first, parked, second

    first, parked, second = asyncio.run(go())
    assert first == ["0:f0"]
    assert parked == 4 and counted.now == 0  # parked, then resumed and finished
    assert sorted(second) == ["1:s0", "2:s1"]
    assert all(g.complete for g in groups)
    assert all(t.gym == "slow" for g in groups[1:] for t in g.trajectories())
    record = groups[1].finished[0].record
    versions = [v for v, m in zip(record.versions, record.loss_mask, strict=True) if m]
    assert versions[0] == 0 and versions[-1] == 1  # turns sampled before and after parking


def test_evaluation_cancels_the_other_conversations_when_one_fails(tok):
    """One conversation's user endpoint refuses the key: the evaluation stops at once with that
    error and the other conversations are cancelled (their envs closed), not run to the end."""
    from mua.errors import RunFailure
    from mua.eval.eval_runner import evaluate
    from mua.rollout.policies import EnginePolicy

    counted = Counted()
    gym = counting_gym("e", counted, turns=3, fail_on="e0")
    slow_engine = Engine(tok)

    async def slow(request):
        if request.route_key.split("/")[0].endswith(":e0"):
            return await Engine.generate(slow_engine, request)
        await asyncio.sleep(5.0)  # the others take long: cancelled, not awaited
        return await Engine.generate(slow_engine, request)

    slow_engine.generate = slow

    async def go():
        with pytest.raises(RunFailure, match="refused"):
            await evaluate(
                tasks("e", 3),
                policy=EnginePolicy(slow_engine, tool_parser="bracket"),
                gym_spec=gym,
                gym_ctx=GymContext(),
                tokenizer=tok,
                rollout_cfg=CFG,
                n=2,
            )
        return counted.now  # when the error reaches the caller, not after the loop's clean-up

    assert asyncio.run(asyncio.wait_for(go(), timeout=3.0)) == 0  # every env opened was closed
    assert counted.started > 1  # the others had started: they were cancelled, not awaited
