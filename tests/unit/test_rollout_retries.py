"""Retries of conversations the environment failed (`rollout.retries`): a fake env fails on
chosen attempts of chosen samples; the tests check the attempts run, the new seeds they get, the
per-step counts, drop_group against mask_member, and a retry pending at a step boundary through
partial rollouts and a checkpoint/resume; and a training step's groups against a real HTTP user
endpoint that fails one request in five."""

from __future__ import annotations

import asyncio
from collections import Counter
from types import SimpleNamespace

import pytest
import torch

from mua.config.rollout import RetryConfig, RolloutConfig
from mua.distributed import DistInfo
from mua.errors import UserFailure
from mua.gym import GymContext, GymSpec, ResetResult, StepResult, Task
from mua.gym.mix import GymRun
from mua.models import load_tokenizer
from mua.rollout.collect import RETRIED_REASONS, Group, SeedKey, collect
from mua.rollout.runner import attempt_seed
from mua.train.partial_rollouts import PartialRollouts, restored, retry_metrics
from tests.fakes.answer_policy import AnswerPolicy
from tests.fakes.fake_openai import FakeOpenAIServer

torch.set_num_threads(1)
SEED_1, SEED_2 = 683374238, 836556688  # attempt_seed(0, 1), attempt_seed(0, 2)
ATTEMPT_OF = {0: 0, SEED_1: 1, SEED_2: 2}
MADE: list[tuple[str, int, int]] = []  # (task id, sample, env seed) of every env reset


class FlakyEnv:
    """Fails the attempts `payload["fail"][sample]` (its attempt read from the env seed): the
    user gives up (`how: user`), reset raises (`env`) or the user hangs (`timeout`). Otherwise
    the first reply ends the game with reward 1. `payload["slow"]["sample/attempt"]` delays the
    user's reply (or the failing reset) by that many seconds."""

    open_envs = 0

    def __init__(self, ctx):
        self.ctx, self.attempt = ctx, ATTEMPT_OF[ctx.seed]

    async def reset(self, task):
        self.task, sample = task, self.ctx.sample_index
        MADE.append((task.task_id, sample, self.ctx.seed))
        FlakyEnv.open_envs += 1
        self.fails = self.attempt in task.payload.get("fail", {}).get(str(sample), [])
        self.delay_s = task.payload.get("slow", {}).get(f"{sample}/{self.attempt}", 0.0)
        if self.fails and task.payload.get("how") == "env":
            await asyncio.sleep(self.delay_s)
            raise RuntimeError("the gym broke")
        return ResetResult(messages=[{"role": "user", "content": "guess"}])

    async def step(self, action):
        await asyncio.sleep(self.delay_s)
        if self.fails and self.task.payload.get("how") == "timeout":
            await asyncio.sleep(30.0)
        if self.fails:
            raise UserFailure("the user endpoint gave up")
        return StepResult(messages=[{"role": "user", "content": "yes"}], reward=1.0, done=True)

    async def close(self):
        FlakyEnv.open_envs -= 1


GYM = GymSpec(name="flaky", description="", make_env=FlakyEnv, build_tasks=lambda *a, **k: {})


class RecordingPolicy(AnswerPolicy):
    """Answers at once; records the seed key of every turn it samples."""

    def __init__(self, tok):
        super().__init__(tok)
        self.keys: list[SeedKey] = []

    async def generate(self, prompt_ids, max_new_tokens, stop_ids, seed_key=None, **_):
        self.keys.append(seed_key)
        return self.answer(stop_ids, max_new_tokens, -1.0)


class FakeSampler:
    def __init__(self, tasks, label="flaky"):
        self.tasks, self.draws, self.label = tasks, 0, label

    def next_labelled(self, k):
        out = [(self.label, self.tasks[(self.draws + i) % len(self.tasks)]) for i in range(k)]
        self.draws += k
        return out


class FakeSync:
    updates = 0

    def run(self, job, timer=None):
        return asyncio.run(job())


DIST = DistInfo(rank=0, world_size=1, local_rank=0, device=torch.device("cpu"), backend="gloo")


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer("tiny:qwen3-1m")


@pytest.fixture(autouse=True)
def _fresh():
    MADE.clear()
    FlakyEnv.open_envs = 0
    yield
    assert FlakyEnv.open_envs == 0  # every env opened, failed or not, was closed


def run_of(n=2, concurrency=64, call_timeout_s=5.0, **retries) -> GymRun:
    cfg = RolloutConfig(
        n=n, max_turns=4, max_new_tokens_per_turn=16, max_concurrency=concurrency,
        call_timeout_s=call_timeout_s, retries=RetryConfig(**retries),
    )  # fmt: skip
    return GymRun("flaky", GYM, GymContext(), cfg, n)


def task(name: str, **payload) -> Task:
    return Task(task_id=name, gym="flaky", split="train", prompt=[], payload=payload)


def step_rollouts(tok, tasks, run, steps=1, carry=None, oversample=1.0, tasks_per_step=None):
    """`steps` rollout phases of training over `tasks`; returns (carry, per-step outputs)."""
    carry = carry or PartialRollouts(oversample, 3)
    sampler, policy = FakeSampler(tasks), RecordingPolicy(tok)
    outs = []
    for step in range(1, steps + 1):
        outs.append(
            carry.rollout(
                sampler=sampler, tasks_per_step=tasks_per_step or len(tasks),
                runs={"flaky": run}, sync=FakeSync(), policy=policy, tokenizer=tok,
                rollout_cfg=run.rollout_cfg, step=step, dist=DIST,
            )
        )  # fmt: skip
    return carry, outs


@pytest.mark.parametrize("how", ["user", "env", "timeout"])
def test_each_failed_attempt_runs_again_with_new_seeds(tok, how):
    run = run_of(n=3, call_timeout_s=0.2, max=2)
    group = Group(0, task("t0", fail={"0": [0, 1], "1": [0]}, how=how), run, SeedKey(5, 7))
    policy, seen = RecordingPolicy(tok), []
    asyncio.run(
        collect(
            [group], policy=policy, tokenizer=tok, max_concurrency=64,
            on_trajectory=lambda g, t: seen.append((t.sample_index, t.attempt)),
        )
    )  # fmt: skip
    assert group.retries == 3 and group.attempts == {0: 2, 1: 1} and not group.exhausted
    assert sorted(seen) == [(0, 2), (1, 1), (2, 0)]  # only each sample's last attempt is reported
    assert [(t.termination, t.attempt) for t in group.trajectories()] == [
        ("done", 2), ("done", 1), ("done", 0),
    ]  # fmt: skip
    # a fresh env per attempt, its seed derived from (seed, attempt)
    envs = [(0, 0), (0, SEED_1), (0, SEED_2), (1, 0), (1, SEED_1), (2, 0)]
    assert sorted((s, seed) for _, s, seed in MADE) == envs
    keys = sorted((k.sample, k.attempt, k.step, k.position) for k in policy.keys)
    tried = [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (2, 0)]  # a failed reset samples nothing
    sampled = [(0, 2), (1, 1), (2, 0)] if how == "env" else tried
    assert keys == [(s, a, 5, 7) for s, a in sampled]


def test_seeds_of_a_retry_are_new_and_first_attempts_keep_theirs():
    from mua.rollout.policies import SeededPolicy

    assert [attempt_seed(0, a) for a in range(3)] == [0, SEED_1, SEED_2]
    assert attempt_seed(7, 0) == 7 and attempt_seed(7, 1) == 1299777081
    train = SeededPolicy.for_rollout(None, RolloutConfig(), "auto", seed=11)
    assert train.request_seed(SeedKey(3, 5, 1), 2) == 997504508518709488  # as before retries
    assert train.request_seed(SeedKey(3, 5, 1, attempt=1), 2) == 1346682025567880929
    assert train.request_seed(SeedKey(3, 5, 1, attempt=2), 2) == 3464926940496140924
    evaluation = SeededPolicy(None, seed=11)
    assert evaluation.request_seed(SeedKey(None, "t9", 1), 2) == 4493579081532772327
    assert evaluation.request_seed(SeedKey(None, "t9", 1, attempt=1), 2) == 4197660609512295209


def test_policy_endings_are_not_retried_and_off_is_todays_masking(tok):
    assert RETRIED_REASONS == {"user_failure", "env_error", "timeout"}
    from mua.algo.filters import FAILURE_REASONS

    assert RETRIED_REASONS < FAILURE_REASONS
    tasks = [task("t0", fail={"1": [0]}, how="user"), task("t1")]
    _, (off,) = step_rollouts(tok, tasks, run_of())  # retries off: the default
    assert off.group_sizes == [2, 2] and off.retries == {
        "retries": 0.0, "retry_exhausted": 0.0, "groups_dropped_failed": 0.0,
    }  # fmt: skip
    assert [t.termination for t in off.trajectories] == ["done", "user_failure", "done", "done"]
    assert len(MADE) == 4


def test_drop_group_drops_the_group_and_counts_it(tok):
    """One conversation at a time: t0's sample 0 fails after its retry, so its sample 1 never
    starts; t1's sample 0 succeeds on its retry."""
    tasks = [task("t0", fail={"0": [0, 1]}, how="user"), task("t1", fail={"0": [0]}, how="env")]
    carry, (out,) = step_rollouts(tok, tasks, run_of(max=1, concurrency=1))
    assert MADE == [("t0", 0, 0), ("t0", 0, SEED_1), ("t1", 0, 0), ("t1", 0, SEED_1), ("t1", 1, 0)]
    assert out.group_sizes == [0, 2]  # t0's place stays, empty, so positions keep their ranks
    assert [(t.group_id, t.sample_index, t.attempt) for t in out.trajectories] == [
        ("1:t1", 0, 1), ("1:t1", 1, 0),
    ]  # fmt: skip
    assert out.retries == {"retries": 2.0, "retry_exhausted": 1.0, "groups_dropped_failed": 1.0}
    assert retry_metrics(out.retries) == {
        "rollout/retries": 2.0, "rollout/retry_exhausted": 1.0, "rollout/groups_dropped_failed": 1.0,
    }  # fmt: skip
    assert not carry.carried


def test_a_failed_group_starts_no_more_conversations(tok):
    """One conversation at a time: once t0's sample 0 fails after its retry, samples 1 and 2
    never start."""
    run = run_of(n=3, concurrency=1, max=1)
    group = Group(0, task("t0", fail={"0": [0, 1]}, how="user"), run, SeedKey(0, 0))
    done = asyncio.run(
        collect([group], policy=RecordingPolicy(tok), tokenizer=tok, max_concurrency=1,
                drop_failed=True)
    )  # fmt: skip
    assert done == [] and group.failed and group.exhausted == {0}
    assert MADE == [("t0", 0, 0), ("t0", 0, SEED_1)]


def test_mask_member_keeps_the_group_with_the_member_masked(tok):
    from mua.config.train import GRPOConfig
    from mua.train.rl_batch import score

    tasks = [task("t0", fail={"1": [0, 1]}, how="user"), task("t1")]
    _, (out,) = step_rollouts(tok, tasks, run_of(max=1, on_exhausted="mask_member"))
    assert out.group_sizes == [2, 2]
    assert [(t.termination, t.attempt) for t in out.trajectories] == [
        ("done", 0), ("user_failure", 1), ("done", 0), ("done", 0),
    ]  # fmt: skip
    assert out.retries == {"retries": 1.0, "retry_exhausted": 1.0, "groups_dropped_failed": 0.0}
    batch = score(out.trajectories, GRPOConfig(), rank=0, world_size=1, n=2)
    assert batch.report.excluded_by_termination == 1


def test_the_retry_settings_survive_the_resolved_recipe_round_trip():
    """Every rank re-reads the resolved recipe, which writes every field: the defaults and a
    set `on_exhausted` must read back as they were written."""
    for cfg in (RetryConfig(), RetryConfig(on_exhausted="mask_member")):
        assert RetryConfig.model_validate(cfg.model_dump()) == cfg


@pytest.mark.parametrize("boundary", ["parked", "unstarted"])
def test_a_retry_pending_at_a_step_boundary_runs_once(tok, boundary):
    """Oversampling 2, one group a step. t0 finishes after 0.1 s; t1's sample 0 fails its first
    attempt, and at the boundary its retry is parked (waiting on a slow user) or not started (the
    failure came after the gate closed). The next step (drawing the slow t3) runs that retry
    exactly once."""
    slow = {"parked": {"0/1": 0.3}, "unstarted": {"0/0": 0.3}}[boundary]
    how = "user" if boundary == "parked" else "env"
    tasks = [
        task("t0", slow={"0/0": 0.1, "1/0": 0.1}),
        task("t1", fail={"0": [0]}, how=how, slow=slow),
        task("t3", slow={"0/0": 2.0, "1/0": 2.0}),
    ]
    carry, outs = step_rollouts(
        tok, tasks, run_of(max=2), steps=2, oversample=2.0, tasks_per_step=1
    )  # fmt: skip
    first, second = outs
    assert [t.task_id for t in first.trajectories] == ["t0", "t0"]
    assert first.retries["retries"] == 1.0 and second.retries["retries"] == 0.0
    assert [(t.task_id, t.sample_index, t.attempt) for t in second.trajectories] == [
        ("t1", 0, 1), ("t1", 1, 0),
    ]  # fmt: skip
    t1_envs = sorted((s, seed) for name, s, seed in MADE if name == "t1")
    assert t1_envs == [(0, 0), (0, SEED_1), (1, 0)]  # the retry's env made once
    carry.close()


def test_a_retry_pending_at_a_checkpoint_survives_the_resume_once(tok):
    """The run stops at the boundary with t1's retry parked: the checkpoint lists t1 once, with
    its finished sample 1; the resumed run restarts it once (sample 0 from its first attempt, so
    it fails and is retried again, counted in the resumed step; sample 1 kept), trains it once
    and nothing else."""
    tasks = [
        task("t0", slow={"0/0": 0.1, "1/0": 0.1}),
        task("t1", fail={"0": [0]}, how="user", slow={"0/1": 0.3}),
    ]
    first, (out,) = step_rollouts(tok, tasks, run_of(max=2), oversample=2.0, tasks_per_step=1)
    assert out.retries["retries"] == 1.0
    saved = first.in_flight_tasks()  # what the checkpoint records
    assert [(label, task_id, set(done)) for label, task_id, done in saved] == [
        ("flaky", "t1", {"1"})
    ]
    assert first.close() == 1
    resumed = PartialRollouts(2.0, 3)
    resumed.requeue(
        [restored(entry, SimpleNamespace(find_task=lambda *_: tasks[1])) for entry in saved]
    )
    slow = task("t2", slow={"0/0": 2.0, "1/0": 2.0})
    _, (after,) = step_rollouts(
        tok, [slow], run_of(max=2), carry=resumed, oversample=2.0, tasks_per_step=1
    )  # fmt: skip
    assert after.counts["restarted_groups"] == 1.0
    assert after.retries == {"retries": 1.0, "retry_exhausted": 0.0, "groups_dropped_failed": 0.0}
    assert [(t.task_id, t.sample_index, t.attempt) for t in after.trajectories] == [
        ("t1", 0, 1), ("t1", 1, 0),
    ]  # fmt: skip
    assert Counter(name for name, _, _ in MADE) == {"t0": 2, "t1": 5, "t2": 2}
    assert [g.task.task_id for g in resumed.carried] == ["t2"]  # drawn after the requeued t1
    resumed.close()


# -- a real user endpoint that fails one request in five -----------------------------------------


def every_fifth_fails(index: int, _body: dict):
    """HTTP 500 on requests 4, 9, 14, ...: 20 % of them, the same ones on every run."""
    return "http500" if index % 5 == 4 else None


@pytest.fixture(scope="module")
def engine():
    from mua.engines.hf.hf_engine import HFEngine
    from mua.models import load_model

    return HFEngine(load_model("tiny:qwen3-1m", seed=0))


@pytest.mark.parametrize(
    ("retries", "requests", "scored", "failed"),
    [(2, 19, [4, 4], 3), (0, 14, [3, 3], 2)],
)
def test_retries_keep_every_group_full_against_a_failing_user(
    tok, engine, retries, requests, scored, failed
):
    """A training step's rollout phase: 2 groups of 4 conversations on the tiny model (hf
    engine), one at a time (so the failing requests fall on the same conversations every run),
    each conversation asking the LLM user (a real HTTP server on 127.0.0.1, no client retries)
    twice. With retries every group keeps its 4 scored members; without, 2 are masked."""
    from mua.llm.llm_client import LLMClient
    from mua.rollout.policies import SeededPolicy
    from tests.unit.test_rollout_faults import ChatEnv, user_cfg

    cfg = RolloutConfig(
        n=4, max_turns=3, max_new_tokens_per_turn=8, max_total_tokens=512, max_concurrency=1,
        retries=RetryConfig(max=retries),
    )  # fmt: skip
    spec = GymSpec(name="chat", description="", make_env=ChatEnv, build_tasks=lambda *a: {})
    chat = [Task(f"c{i}", "chat", "train", [{"role": "user", "content": "hi"}], {}) for i in (0, 1)]
    policy = SeededPolicy.for_rollout(engine, cfg, "bracket", seed=0)
    with FakeOpenAIServer(faults=every_fifth_fails) as server:
        ctx = GymContext(user_kind="llm", llm=LLMClient(user_cfg(server, max_retries=0)))
        out = PartialRollouts(1.0, 0).rollout(
            sampler=FakeSampler(chat, "chat"), tasks_per_step=2,
            runs={"chat": GymRun("chat", spec, ctx, cfg, 4)},
            sync=FakeSync(), policy=policy, tokenizer=tok, rollout_cfg=cfg, step=1, dist=DIST,
        )  # fmt: skip
        assert server.total_requests == requests and server.faults_injected == {"http500": failed}
    assert out.group_sizes == [4, 4] and len(out.trajectories) == 8
    kept = Counter(t.task_id for t in out.trajectories if t.termination == "done")
    assert [kept["c0"], kept["c1"]] == scored
    assert out.retries == {
        "retries": float(failed if retries else 0), "retry_exhausted": 0.0,
        "groups_dropped_failed": 0.0,
    }  # fmt: skip
    masked = [t.termination for t in out.trajectories if t.termination != "done"]
    assert masked == ([] if retries else ["user_failure", "user_failure"])


@pytest.mark.parametrize("retries", [0, 2])
def test_the_step_logs_the_retry_counts_when_retries_are_on(retries):
    from types import SimpleNamespace

    from mua.train import rl
    from mua.train.partial_rollouts import StepRollouts

    counts = {"retries": 3.0, "retry_exhausted": 1.0, "groups_dropped_failed": 1.0}
    out = StepRollouts([], [0], [], {}, counts)
    recipe = SimpleNamespace(
        rollout=RolloutConfig(n=2, retries=RetryConfig(max=retries)),
        data=SimpleNamespace(tasks_per_step=1),
    )
    _, sizes, metrics = rl.rollout(
        1, recipe=recipe, dist=DIST, state=SimpleNamespace(tokenizer=None),
        parts=SimpleNamespace(carry=SimpleNamespace(rollout=lambda **kw: out), runs={}, sync=None,
                              policy=None),
        sampler=None, tracker=SimpleNamespace(rollout_progress=lambda step, total: None),
        timer=None,
    )  # fmt: skip
    assert sizes == [0]
    expected = {"rollout/retries": 3.0, "rollout/retry_exhausted": 1.0}
    expected["rollout/groups_dropped_failed"] = 1.0
    assert metrics == (expected if retries else {})
