"""The rollout runner: groups, budgets, every termination reason, failures isolated per trajectory,
the concurrency bound, interventions, and an end-to-end run with the hf engine on the guess gym."""

from __future__ import annotations

import asyncio

import pytest
import torch

from mua.config.rollout import RolloutConfig
from mua.engines.engine_contract import GenerationResult
from mua.gym import (
    AgentAction,
    GymContext,
    GymSpec,
    ResetResult,
    StepResult,
    Task,
    UserFailure,
    get_gym,
)
from mua.models import load_model, load_tokenizer
from mua.rollout.collect import run_rollouts, run_rollouts_sync
from mua.rollout.policies import EnginePolicy, MessagePolicy
from tests.conftest import expert_rollouts

torch.set_num_threads(1)
TERMINATIONS = {"done", "max_turns", "length", "timeout", "user_failure", "env_error"}


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer("tiny:qwen3-1m")


def cfg(**kw) -> RolloutConfig:
    base = dict(
        max_turns=4,
        max_new_tokens_per_turn=16,
        max_total_tokens=512,
        call_timeout_s=5.0,
        trajectory_timeout_s=30.0,
        max_concurrency=8,
    )
    base.update(kw)
    return RolloutConfig(**base)


def task(i: int, **payload) -> Task:
    return Task(
        task_id=f"t{i}",
        gym="fake",
        split="train",
        prompt=[{"role": "system", "content": "play"}, {"role": "user", "content": "go"}],
        payload=payload,
    )


class FakeEnv:
    """Behaviour picked by the task payload: solve at turn k, fail, hang, intervene."""

    active = 0
    most_active = 0

    def __init__(self, ctx):
        self.turn = 0

    async def reset(self, task):
        self.task = task
        FakeEnv.active += 1
        FakeEnv.most_active = max(FakeEnv.most_active, FakeEnv.active)
        if task.payload.get("reset_error"):
            raise KeyError("broken reset")
        return ResetResult(messages=[dict(m) for m in task.prompt])

    async def step(self, action: AgentAction):
        p, self.turn = self.task.payload, self.turn + 1
        await asyncio.sleep(p.get("step_sleep_s", 0.0))
        if p.get("user_failure_at") == self.turn:
            raise UserFailure("simulator gave up after 4 retries")
        if p.get("error_at") == self.turn:
            raise ZeroDivisionError("env bug")
        done = p.get("done_at") == self.turn
        role = p.get("reply_role", "user")
        return StepResult(
            messages=[{"role": role, "content": f"reply {self.turn}"}],
            reward=0.5 if done else 0.1,
            components={"a": 0.25},
            done=done,
            info={"errors": {"unknown_tool": 1}} if "tool" in action.text else {},
        )

    async def close(self):
        FakeEnv.active -= 1


FAKE_GYM = GymSpec(name="fake", description="", make_env=FakeEnv, build_tasks=lambda *a, **k: {})


def says(text: str, delay_s: float = 0.0) -> MessagePolicy:
    async def act(messages, task):
        await asyncio.sleep(delay_s)
        return {"role": "assistant", "content": text}

    return MessagePolicy(act)


class ScriptedTokens:
    """A token-level policy replaying fixed text as tokens (optionally without a stop token)."""

    kind = "tokens"
    tool_parser = "auto"

    def __init__(self, tok, text: str, stop: bool = True):
        self.ids = tok.encode(text, add_special_tokens=False)
        self.stop = stop
        self.prompts = []
        self.keep_prefix = []

    async def generate(
        self, prompt_ids, max_new_tokens, stop_token_ids, route_key="", keep_prefix=True, **seed
    ):
        self.prompts.append(list(prompt_ids))
        self.keep_prefix.append(keep_prefix)
        ids = self.ids + ([stop_token_ids[0]] if self.stop else [])
        cut = ids[:max_new_tokens]
        reason = "stop" if cut and cut[-1] in stop_token_ids else "length"
        return GenerationResult(token_ids=cut, logprobs=[-0.25] * len(cut), finish_reason=reason)


def run(tasks, policy, tok, n=1, **kw):
    FakeEnv.active = FakeEnv.most_active = 0
    return run_rollouts_sync(
        tasks,
        n=n,
        policy=policy,
        gym_spec=FAKE_GYM,
        gym_ctx=GymContext(),
        tokenizer=tok,
        rollout_cfg=cfg(**kw),
    )


def test_groups_rewards_and_done(tok):
    trajs = run([task(0, done_at=2), task(1, done_at=1), task(2, done_at=3)], says("hi"), tok, n=4)
    assert [t.task_id for t in trajs] == ["t0"] * 4 + ["t1"] * 4 + ["t2"] * 4
    assert [t.sample_index for t in trajs[:4]] == [0, 1, 2, 3]
    assert len({t.group_id for t in trajs}) == 3 and len({t.group_id for t in trajs[:4]}) == 1
    t0 = trajs[0]
    assert t0.termination == "done" and t0.num_turns == 2
    assert t0.turn_rewards == [0.1, 0.5] and t0.reward == pytest.approx(0.6)
    assert t0.reward_components == {"a": 0.5}
    assert [m["role"] for m in t0.messages] == [
        "system",
        "user",
        "assistant",
        "user",
        "assistant",
        "user",
    ]
    assert t0.metrics["drift"] == 0.0 and sum(t0.loss_mask) > 0
    assert FakeEnv.active == 0  # every env was closed


def test_max_turns(tok):
    (t,) = run([task(0)], says("hi"), tok, max_turns=3)
    assert t.termination == "max_turns" and t.num_turns == 3 and len(t.turn_rewards) == 3
    assert max(t.turn_index) == 2


def test_only_the_last_allowed_turn_says_nothing_continues_it(tok):
    policy = ScriptedTokens(tok, "hi")
    (t,) = run([task(0)], policy, tok, max_turns=3)
    assert t.num_turns == 3 and policy.keep_prefix == [True, True, False]


def test_total_token_budget_ends_with_length(tok):
    policy = ScriptedTokens(tok, "a long answer that keeps going and going")
    (t,) = run([task(0)], policy, tok, max_new_tokens_per_turn=16, max_total_tokens=60, max_turns=8)
    assert t.termination == "length"
    assert len(t.token_ids) <= 60 + 16
    assert all(len(p) < 60 for p in policy.prompts)


def test_turn_cut_by_per_turn_budget_is_closed_and_trained_only_on_samples(tok):
    policy = ScriptedTokens(tok, "word " * 30, stop=False)
    (t,) = run([task(0, done_at=2)], policy, tok, max_new_tokens_per_turn=8)
    assert t.termination == "done" and t.num_turns == 2
    stop_id = tok.convert_tokens_to_ids("<|im_end|>")
    first_turn = [i for i, k in enumerate(t.turn_index) if k == 0]
    assert len(first_turn) == 8 and t.token_ids[first_turn[-1] + 1] == stop_id
    assert t.loss_mask[first_turn[-1] + 1] == 0  # the closing stop was not sampled
    assert t.metrics["drift"] == 0.0


def test_engine_turns_keep_sampled_ids_and_logprobs(tok):
    policy = ScriptedTokens(tok, "<tool_call>{bad json")
    (t,) = run([task(0, done_at=2)], policy, tok)
    sampled = [i for i, m in enumerate(t.loss_mask) if m]
    assert [t.logprobs[i] for i in sampled] == [-0.25] * len(sampled)
    assert t.metrics["parse_errors"] == 2  # unreadable output is counted, not fatal
    # The second prompt is the first prompt plus the first turn verbatim plus the reply.
    first, second = policy.prompts
    assert second[: len(first)] == first and second[
        len(first) : len(first) + len(policy.ids) + 1
    ] == policy.ids + [tok.convert_tokens_to_ids("<|im_end|>")]


def test_failures_end_only_their_trajectory(tok):
    tasks = [
        task(0, done_at=2),
        task(1, user_failure_at=1),
        task(2, error_at=2),
        task(3, reset_error=True),
        task(4, done_at=1),
    ]
    trajs = run(tasks, says("hi"), tok)
    reasons = {t.task_id: t.termination for t in trajs}
    assert reasons == {
        "t0": "done",
        "t1": "user_failure",
        "t2": "env_error",
        "t3": "env_error",
        "t4": "done",
    }
    by_id = {t.task_id: t for t in trajs}
    assert "gave up" in by_id["t1"].detail and "ZeroDivisionError" in by_id["t2"].detail
    assert by_id["t2"].num_turns == 2 and by_id["t3"].token_ids == []
    assert FakeEnv.active == 0


def test_step_timeout_and_trajectory_timeout(tok):
    (slow_env,) = run([task(0, step_sleep_s=1.0)], says("hi"), tok, call_timeout_s=0.05)
    assert slow_env.termination == "timeout" and "env.step" in slow_env.detail
    (slow_policy,) = run(
        [task(0)], says("hi", delay_s=0.2), tok, trajectory_timeout_s=0.3, max_turns=8
    )
    assert slow_policy.termination == "timeout" and "trajectory" in slow_policy.detail
    assert (
        1 <= slow_policy.num_turns <= 2 and len(slow_policy.turn_rewards) == slow_policy.num_turns
    )
    assert FakeEnv.active == 0


def test_concurrency_bound(tok):
    tasks = [task(i, step_sleep_s=0.01, done_at=2) for i in range(10)]
    trajs = run(tasks, says("hi"), tok, n=2, max_concurrency=3)
    assert len(trajs) == 20 and FakeEnv.most_active == 3


def test_interventions_chat_and_raw(tok):
    (chat,) = run([task(0, reply_role="env", done_at=2)], says("thinking"), tok)
    env_text = tok.decode(
        [i for i, s in zip(chat.token_ids, chat.sources, strict=False) if s == "env"]
    )
    assert "<|im_start|>user\nreply 1<|im_end|>" in env_text
    policy = ScriptedTokens(tok, "step", stop=False)
    (raw,) = run(
        [task(0, reply_role="env", done_at=2)],
        policy,
        tok,
        intervention_style="raw",
        max_new_tokens_per_turn=4,
    )
    env_ids = [i for i, s in enumerate(raw.sources) if s == "env"]
    assert tok.decode([raw.token_ids[i] for i in env_ids]) == "reply 1"
    assert (
        raw.sources[env_ids[0] - 1] == "assistant" and raw.sources[env_ids[-1] + 1] == "assistant"
    )
    assert all(raw.loss_mask[i] == 0 for i in env_ids)
    assert raw.messages[3]["style"] == "raw"


def test_progress_is_told_about_every_trajectory(tok):
    seen = []

    class Progress:
        def advance(self, traj):
            seen.append(traj.task_id)

    asyncio.run(
        run_rollouts(
            [task(0, done_at=1), task(1, done_at=1)],
            n=3,
            policy=says("x"),
            gym_spec=FAKE_GYM,
            gym_ctx=GymContext(),
            tokenizer=tok,
            rollout_cfg=cfg(),
            progress=Progress(),
        )
    )
    assert sorted(seen) == ["t0"] * 3 + ["t1"] * 3


def test_guess_end_to_end_with_hf_engine_and_expert(tok):
    from mua.engines.hf.hf_engine import HFEngine

    gym = get_gym("guess")
    tasks = gym.build_tasks(None, seed=0, options={})["test"][:4]
    ctx = GymContext()
    expert = expert_rollouts(gym, tasks, tok, cfg(max_turns=8), ctx)
    assert all(
        t.termination == "done" and t.reward == 1.0 and t.metrics["drift"] == 0.0 for t in expert
    )
    engine = HFEngine(load_model("tiny:qwen3-1m", seed=0))
    policy = EnginePolicy(engine, temperature=1.0, tool_parser="bracket")
    trajs = run_rollouts_sync(
        tasks,
        n=2,
        policy=policy,
        gym_spec=gym,
        gym_ctx=ctx,
        tokenizer=tok,
        rollout_cfg=cfg(max_turns=3, max_new_tokens_per_turn=8, max_total_tokens=256),
    )
    assert len(trajs) == 8 and {t.termination for t in trajs} <= TERMINATIONS
    for t in trajs:
        n = len(t.token_ids)
        assert len(t.sources) == len(t.loss_mask) == len(t.logprobs) == len(t.turn_index) == n
        sampled = [lp for lp, m in zip(t.logprobs, t.loss_mask, strict=False) if m]
        assert (
            sampled and all(lp <= 0 for lp in sampled) and any(lp < 0 for lp in sampled)
        ) or t.metrics["drift"]
