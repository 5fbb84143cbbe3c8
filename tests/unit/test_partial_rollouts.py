"""Partial rollouts: conversations park between turns and resume under new weights; over many
steps every group is trained exactly once or dropped and counted, never lost or doubled.

The env answers after a delay set per task (a slow simulated user) and ends the game at a set
turn; the token policy writes its weight version into every log-prob, so a carried
conversation's tokens show which weights sampled them.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from mua.background_loop import BackgroundLoop
from mua.config.rollout import RolloutConfig
from mua.distributed import DistInfo
from mua.gym import GymContext, GymSpec, ResetResult, StepResult, Task
from mua.gym.mix import GymRun
from mua.models import load_tokenizer
from mua.rollout.collect import Group, SeedKey, collect
from mua.rollout.token_record import TokenRecord
from mua.rollout.trajectory import Trajectory
from mua.train.checkpoint import load_plain
from mua.train.partial_rollouts import (
    PartialRollouts,
    restore_in_flight,
    restored,
    staleness_metrics,
)
from tests.fakes.answer_policy import AnswerPolicy

torch.set_num_threads(1)


class SlowUserEnv:
    open_envs = 0
    resets = 0

    def __init__(self, ctx):
        self.turn = 0

    async def reset(self, task):
        self.task = task
        SlowUserEnv.open_envs += 1
        SlowUserEnv.resets += 1
        return ResetResult(messages=[{"role": "user", "content": "guess"}])

    async def step(self, action):
        self.turn += 1
        await asyncio.sleep(self.task.payload["delay_s"])
        done = self.turn == self.task.payload["done_at"]
        return StepResult(
            messages=[{"role": "user", "content": f"reply {self.turn}"}],
            reward=1.0 if done else 0.0,
            done=done,
        )

    async def close(self):
        SlowUserEnv.open_envs -= 1


GYM = GymSpec(name="slow", description="", make_env=SlowUserEnv, build_tasks=lambda *a, **k: {})


class VersionedPolicy(AnswerPolicy):
    """Writes `version` into each sampled token's log-prob (−version − 1)."""

    def __init__(self, tok):
        super().__init__(tok)
        self.version = 0
        self.steps = []

    def start_step(self, step):
        self.steps.append(step)

    async def generate(
        self, prompt_ids, max_new_tokens, stop_ids, route_key="", keep_prefix=True, **seed
    ):
        return self.answer(stop_ids, max_new_tokens, -(self.version + 1.0))


OPEN: list[PartialRollouts] = []


@pytest.fixture(autouse=True)
def _close_background_loops():
    yield
    while OPEN:
        OPEN.pop().close()


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer("tiny:qwen3-1m")


CFG = RolloutConfig(
    n=2, max_turns=6, max_new_tokens_per_turn=16, max_total_tokens=1024, max_concurrency=64
)
ROUTE = GymRun("slow", GYM, GymContext(), CFG, 2)


def task(i: int, done_at: int, delay_s: float) -> Task:
    return Task(
        task_id=f"t{i}",
        gym="slow",
        split="train",
        prompt=[],
        payload={"done_at": done_at, "delay_s": delay_s},
    )


def advance(loop, groups, policy, tok, target):
    """Advance `groups` on `loop` until `target` are complete, at the policy's version."""
    return loop.call(
        collect(
            groups, until=target, version=policy.version, policy=policy, tokenizer=tok,
            max_concurrency=64,
        )
    )  # fmt: skip


def test_parked_conversations_resume_under_new_weights(tok):
    SlowUserEnv.open_envs = SlowUserEnv.resets = 0
    policy = VersionedPolicy(tok)
    groups = [
        Group(0, task(0, 1, 0.0), ROUTE, SeedKey(0, 0)),
        Group(1, task(1, 4, 0.02), ROUTE, SeedKey(0, 1)),
        Group(2, task(2, 4, 0.02), ROUTE, SeedKey(0, 2)),
    ]
    loop = BackgroundLoop()

    try:
        assert advance(loop, groups, policy, tok, 1) == ["0:t0"]
        slow = groups[1:]
        assert all(not g.complete and len(g.parked) == 2 for g in slow)  # parked, not lost
        assert SlowUserEnv.open_envs == 4  # parked envs stay open
        policy.version = 1  # a weight push between the steps
        assert sorted(advance(loop, groups, policy, tok, 2)) == ["1:t1", "2:t2"]
    finally:
        loop.close()
    assert SlowUserEnv.open_envs == 0 and SlowUserEnv.resets == 6  # each env reset once
    for g in slow:
        for traj in g.trajectories():
            assert traj.termination == "done" and traj.num_turns == 4
            record = traj.record
            versions = [v for v, m in zip(record.versions, record.loss_mask, strict=True) if m]
            assert versions[0] == 0 and versions[-1] == 1  # resumed under the new weights
            for lp, v, m in zip(record.logprobs, record.versions, record.loss_mask, strict=True):
                if m:  # each token's behaviour log-prob is the one its version gave
                    assert lp == -(v + 1.0)
            replies = [m["content"] for m in traj.messages if m["content"].startswith("reply")]
            assert replies == ["reply 1", "reply 2", "reply 3", "reply 4"]


def test_the_gate_does_not_wait_for_user_replies(tok):
    """A conversation whose user is answering when the gate closes parks at once; the reply
    arrives while the caller does something else (trains) and is in the transcript when the
    conversation resumes."""
    SlowUserEnv.open_envs = 0
    policy = VersionedPolicy(tok)
    groups = [Group(0, task(0, 1, 0.0), ROUTE, SeedKey(0, 0))]
    groups += [Group(i, task(i, 2, 0.8), ROUTE, SeedKey(0, i)) for i in (1, 2)]
    loop = BackgroundLoop()

    try:
        clock = time.monotonic()
        assert advance(loop, groups, policy, tok, 1) == ["0:t0"]
        assert time.monotonic() - clock < 0.5  # not the user's 0.8 s
        parked = [p for g in groups[1:] for p in g.parked.values()]
        assert len(parked) == 4 and all(p.pending is not None for p in parked)
        assert not any(p.pending.done() for p in parked)
        time.sleep(1.0)  # "training": the replies arrive in the background meanwhile
        assert all(p.pending.done() for p in parked)
        assert all(p.episode.messages[-1]["content"] == "reply 1" for p in parked)
        clock = time.monotonic()
        assert sorted(advance(loop, groups, policy, tok, 2)) == ["1:t1", "2:t2"]
    finally:
        loop.close()
    for g in groups[1:]:
        for traj in g.trajectories():
            replies = [m["content"] for m in traj.messages if m["content"].startswith("reply")]
            assert replies == ["reply 1", "reply 2"] and traj.num_turns == 2
    assert SlowUserEnv.open_envs == 0


def test_closing_cancels_pending_replies_and_closes_envs(tok):
    SlowUserEnv.open_envs = 0
    policy = VersionedPolicy(tok)
    carry = PartialRollouts(2.0, 3)
    carry.carried = [Group(0, task(0, 1, 0.0), ROUTE, SeedKey(0, 0))]
    carry.carried += [Group(1, task(1, 3, 5.0), ROUTE, SeedKey(0, 1))]
    loop = carry.background()
    loop.call(
        collect(carry.carried, until=1, version=0, policy=policy, tokenizer=tok, max_concurrency=64)
    )
    carry.carried = carry.carried[1:]
    assert SlowUserEnv.open_envs == 2
    clock = time.monotonic()
    assert carry.close() == 1  # one group still in flight at the end
    assert time.monotonic() - clock < 2.0  # the 5 s replies were cancelled, not awaited
    assert SlowUserEnv.open_envs == 0 and carry.loop is None
    assert carry.close() == 0


class FakeSampler:
    def __init__(self, make):
        self.draws = 0
        self.make = make

    def next_labelled(self, k):
        out = [("slow", self.make(self.draws + i)) for i in range(k)]
        self.draws += k
        return out


class FakeSync:
    updates = 0

    def run(self, job, timer=None):
        return asyncio.run(job())


def run_steps(
    tok, steps, make, oversample, max_staleness, tasks_per_step=4, carry=None, sampler=None
):
    carry = carry or PartialRollouts(oversample, max_staleness)
    OPEN.append(carry)
    sampler, sync, policy = sampler or FakeSampler(make), FakeSync(), VersionedPolicy(tok)
    dist = DistInfo(rank=0, world_size=1, local_rank=0, device=torch.device("cpu"), backend="gloo")
    trained, per_step = [], []
    for step in range(1, steps + 1):
        policy.version = sync.updates
        out = carry.rollout(
            sampler=sampler, tasks_per_step=tasks_per_step, runs={"slow": ROUTE},
            sync=sync, policy=policy, tokenizer=tok, rollout_cfg=CFG, step=step, dist=dist,
        )  # fmt: skip
        per_step.append(out)
        trained.extend(t.task_id for t in out.trajectories)
        sync.updates += 1  # the step's update and push
    return carry, sampler, trained, per_step


def test_every_group_is_trained_once_or_counted_as_dropped(tok):
    SlowUserEnv.open_envs = 0
    # one task in three is a long, slow conversation: the rest finish at once
    make = lambda i: task(i, 5 if i % 3 == 2 else 1, 0.03 if i % 3 == 2 else 0.0)  # noqa: E731
    carry, sampler, trained, per_step = run_steps(tok, 6, make, 1.5, 1)
    for out in per_step:
        assert len(out.trajectories) == 8  # 4 groups of 2 every step
        assert out.group_sizes == [2, 2, 2, 2]
        assert [t.group_id.split(":")[0] for t in out.trajectories] == [
            "0", "0", "1", "1", "2", "2", "3", "3",
        ]  # fmt: skip
        assert max(out.staleness) <= 1
    counts = Counter(trained)
    assert all(c == 2 for c in counts.values())  # a group's 2 samples, trained once
    dropped = sum(out.counts["dropped_stale_samples"] for out in per_step)
    carried = sum(g.run.n for g in carry.carried)
    drawn = sampler.draws * 2
    assert len(trained) + dropped + carried == drawn  # nothing lost
    assert dropped > 0  # the slow groups outlive the bound of 1
    assert any(out.counts["groups_resumed"] for out in per_step)


def test_staleness_bound_and_metrics(tok):
    make = lambda i: task(i, 3 if i % 2 else 1, 0.03 if i % 2 else 0.0)  # noqa: E731
    _, _, _, per_step = run_steps(tok, 4, make, 2.0, 3)
    assert any(max(out.staleness) > 0 for out in per_step)  # carried groups are trained
    assert all(max(out.staleness) <= 3 for out in per_step)
    m = staleness_metrics([per_step[-1].staleness], [per_step[-1].counts])
    hist = {k: v for k, v in m.items() if k.startswith("async/staleness_hist/")}
    assert sum(hist.values()) == len(per_step[-1].staleness)
    assert m["async/staleness_max"] == max(per_step[-1].staleness)


def test_no_oversampling_trains_every_group_in_its_own_step(tok):
    make = lambda i: task(i, 2, 0.0)  # noqa: E731
    carry, sampler, trained, per_step = run_steps(tok, 3, make, 1.0, 0)
    assert sampler.draws == 12 and not carry.carried
    assert all(max(out.staleness) == 0 for out in per_step)


def test_stale_groups_close_their_envs(tok):
    SlowUserEnv.open_envs = 0
    make = lambda i: task(i, 6, 0.05) if i == 0 else task(i, 1, 0.0)  # noqa: E731
    carry, _, trained, per_step = run_steps(tok, 4, make, 1.25, 1, tasks_per_step=4)
    assert "t0" not in trained
    assert sum(out.counts["dropped_stale_samples"] for out in per_step) >= 2
    parked_now = sum(len(g.parked) for g in carry.carried)
    assert SlowUserEnv.open_envs == parked_now  # dropped groups closed theirs


def test_sizes_are_interleaved_by_rank():
    from mua.train.partial_rollouts import _by_global_position

    assert _by_global_position([[2, 3], [4]]) == [2, 4, 3]


def test_a_resumed_run_restarts_the_groups_in_flight_at_its_checkpoint(tok):
    """Run 3 steps, checkpoint, stop (the process and its parked conversations are gone),
    resume for 3 more: every task drawn over both parts is trained exactly once, dropped as
    stale (counted) or still in flight at the end; none is lost at the checkpoint."""
    SlowUserEnv.open_envs = 0
    make = lambda i: task(i, 3 if i % 3 == 2 else 1, 0.03 if i % 3 == 2 else 0.0)  # noqa: E731
    by_id = {}

    def made(i):
        by_id[f"t{i}"] = make(i)
        return by_id[f"t{i}"]

    first, sampler, trained, per_step = run_steps(tok, 3, made, 2.0, 3)
    saved = first.in_flight_tasks()  # what the checkpoint records
    assert saved and [label for label, *_ in saved] == ["slow"] * len(saved)
    assert first.close() == len(saved)  # the stopped run closes its parked envs
    assert SlowUserEnv.open_envs == 0

    second = PartialRollouts(2.0, 3)
    sampler_of_ids = SimpleNamespace(find_task=lambda label, task_id: by_id[task_id])
    second.requeue([restored(entry, sampler_of_ids) for entry in saved])
    _, _, trained_after, after = run_steps(tok, 3, made, 2.0, 3, carry=second, sampler=sampler)
    assert sum(out.counts["restarted_groups"] for out in after) == len(saved)
    trained += trained_after
    counts = Counter(trained)
    assert all(c == 2 for c in counts.values())  # trained once, over both parts of the run
    dropped = sum(out.counts["dropped_stale_samples"] for out in per_step + after)
    in_flight = sum(g.run.n for g in second.carried)
    assert len(trained) + dropped + in_flight == sampler.draws * 2  # nothing lost
    assert {task_id for _, task_id, _ in saved} <= set(counts)  # the restarted ones were trained
    second.close()


def test_closing_during_a_rollout_phase_cancels_it_and_closes_every_env(tok):
    """A run stopped inside a step (an error, Ctrl-C): the conversations still running are
    cancelled and every env they opened is closed."""
    SlowUserEnv.open_envs = 0
    carry = PartialRollouts(2.0, 3)
    carry.carried = [Group(i, task(i, 4, 0.5), ROUTE, SeedKey(0, i)) for i in range(3)]
    loop = carry.background()
    running = asyncio.run_coroutine_threadsafe(
        collect(
            carry.carried, until=3, version=0, policy=VersionedPolicy(tok), tokenizer=tok,
            max_concurrency=64,
        ),
        loop.loop,
    )  # fmt: skip
    time.sleep(0.3)
    assert SlowUserEnv.open_envs == 6
    assert carry.close() == 3
    assert running.cancelled() and SlowUserEnv.open_envs == 0


def test_the_sampler_finds_a_checkpointed_task_by_gym_and_id():
    from mua.errors import UsageError
    from mua.train.mix_sampler import MixSampler

    tasks = [task(i, 1, 0.0) for i in range(3)]
    sampler = MixSampler({"slow": tasks}, {"slow": 1.0}, seed=0)
    assert sampler.find_task("slow", "t2") is tasks[2]
    with pytest.raises(UsageError, match="t9"):
        sampler.find_task("slow", "t9")
    with pytest.raises(UsageError, match="other"):
        sampler.find_task("other", "t0")


def test_a_checkpoint_keeps_finished_samples_with_their_records_and_routes(tmp_path):
    """A group in flight at a checkpoint: its finished sample's trajectory goes into the
    checkpoint's plain data and comes back on resume with the same tokens, log-probs and
    routed experts, its versions counted from the policy the checkpoint holds."""
    record = TokenRecord()
    record.append([11, 12, 13], "prompt", 0)
    record.append([14, 15], "assistant", 1, [-0.5, -0.25], turn=0, version=5)
    record.add_routes(np.arange(16, dtype=np.uint8).reshape(4, 2, 2))  # the last token unfed
    traj = Trajectory("t1", "0:t1", 1, record=record, turn_rewards=[1.0], reward=1.0, gym="slow")
    group = Group(0, task(1, 1, 0.0), ROUTE, SeedKey(2, 0))
    group.finished[1] = traj
    first = PartialRollouts(2.0, 3, carried=[group])
    torch.save({"in_flight": first.in_flight_tasks(version=7)}, tmp_path / "state.pt")
    saved = load_plain(tmp_path / "state.pt")["in_flight"]  # plain data only
    parts = SimpleNamespace(carry=PartialRollouts(2.0, 3))
    recipe = SimpleNamespace(rollout=SimpleNamespace(oversample=2.0))
    restore_in_flight(parts, recipe, saved, SimpleNamespace(find_task=lambda *_: group.task))
    drawn, requeued = parts.carry.draw(None, 1)
    [again] = parts.carry.start_groups(list(enumerate(drawn)), {"slow": ROUTE}, 3, 0)
    assert requeued == 1 and sorted(again.finished) == [1] and not again.complete
    back = again.finished[1]
    assert back.record.routes.dtype == np.uint8
    assert np.array_equal(back.record.routes, record.routes)
    assert back.token_ids == record.token_ids and back.logprobs == record.logprobs
    assert back.record.versions == [-1, -1, -1, -2, -2]  # sampled 2 updates before the checkpoint
    assert back.record == record.shifted(-7) and again.oldest_version() == -2
    assert (back.reward, back.gym, back.sample_index) == (1.0, "slow", 1)
