"""tau2's customer in the user seat (`seat: user`), on the two-sided toy domain of
test_tau2_llm_user: the policy gets the env's own user prompt (guidelines, scenario, its
tools), calls its device's tools as `{"tool_call": ...}` text that the env runs, sees their
results, and is checked against the scripted customer replayed over the conversation; then
the scripted customer in the seat on tau2's public airline, retail and telecom tasks (skipped
without the public data)."""

from __future__ import annotations

import json

import pytest

from gyms.tau2 import GYM
from mua.config.gyms import GymConfig
from mua.gym import GymContext
from mua.models import load_tokenizer
from mua.rollout.collect import run_rollouts_sync
from mua.rollout.policies import expert_policy
from mua.users.seat_spec import seat_spec
from tests.gyms.test_tau2_llm_user import _task, data_dir  # noqa: F401 (fixture)
from tests.unit.test_user_seat import cfg, replies


def _run(folder, policy, max_turns=8):
    entry = GymConfig(name="tau2", seat="user")
    spec = seat_spec(GYM, entry, max_turns)
    ctx = GymContext(options={"data_dir": str(folder)}, seed=0)
    return run_rollouts_sync(
        [_task()],
        policy=policy(spec, ctx) if callable(policy) and not hasattr(policy, "act") else policy,
        gym_spec=spec,
        gym_ctx=ctx,
        tokenizer=load_tokenizer("tiny:qwen3-1m"),
        rollout_cfg=cfg(max_turns),
        n=1,
    )[0]


def test_scripted_customer_in_the_seat_calls_its_tool_and_is_faithful(data_dir):  # noqa: F811
    traj = _run(data_dir, expert_policy)
    assert traj.termination == "done", traj.detail
    assert traj.reward == pytest.approx(1.0)
    said = [m["content"] for m in traj.messages]
    assert said[0].startswith("GUIDE-TOOLSend") and "toggle_airplane_mode" in said[0]
    assert said[1] == "Hi! How can I help you today?"
    call = json.loads(said[4])["tool_call"]
    assert call["name"] == "toggle_airplane_mode"
    assert said[5].startswith("[Tool result from toggle_airplane_mode]\nAirplane mode is now off")
    assert said[-1] == "###STOP###"


def test_a_customer_that_does_not_act_or_stops_early_is_unfaithful(data_dir):  # noqa: F811
    idle = _run(data_dir, replies("Hi, my phone has no service.", "Okay."))
    assert idle.reward < 0.5  # only its opening is clean
    quitter = _run(data_dir, replies("###STOP###"))
    assert quitter.termination == "done" and quitter.reward == pytest.approx(0.0)
    seat = GYM.user_seat
    task = _task()
    asked = ["Hi! How can I help you today?", "Please do this on your phone: toggle_airplane_mode."]
    first = "Hi. Your phone has no service."
    call = '{"tool_call": {"name": "toggle_airplane_mode", "arguments": {}}}'
    assert seat.finding(asked, [first, call], task) is None
    assert "does not call it" in seat.finding(asked, [first, "Done!"], task)
    done = asked + ["[Tool result from toggle_airplane_mode]\nok", "Great, all set now."]
    assert seat.finding(done, [first, call, "It works.", "###STOP###"], task) is None
    assert "did not end" in seat.finding(done, [first, call, "It works.", "Thanks"], task)


@pytest.mark.parametrize("domain", ["airline", "retail", "telecom"])
def test_scripted_customer_is_faithful_on_public_tasks(shared_data, domain):
    """The seat on tau2's own tasks: prompts of the real guidelines, telecom's device tools."""
    data = shared_data / "tau2"
    if not (data / "tau2" / "domains" / domain / "tasks.json").is_file():
        pytest.skip(f"tau2 {domain} data not found under {data}")
    tasks = next(iter(GYM.build_tasks(str(data), seed=0, options={"domain": domain}).values()))
    entry = GymConfig(name="tau2", seat="user")
    spec = seat_spec(GYM, entry, 30)
    ctx = GymContext(options={"data_dir": str(data)}, seed=0)
    trajs = run_rollouts_sync(
        tasks[:4],
        policy=expert_policy(spec, ctx),
        gym_spec=spec,
        gym_ctx=ctx,
        tokenizer=load_tokenizer("tiny:qwen3-1m"),
        rollout_cfg=cfg(30).model_copy(
            update={"max_total_tokens": 60000, "max_new_tokens_per_turn": 256}
        ),
        n=1,
    )
    assert [t.termination for t in trajs] == ["done"] * 4, [t.detail for t in trajs]
    assert [t.reward for t in trajs] == [1.0] * 4
    assert all("<scenario>" in t.messages[0]["content"] for t in trajs)
    if domain == "telecom":  # the user worked its phone through its own tool calls
        assert any('{"tool_call"' in m["content"] for t in trajs for m in t.messages)


def test_the_leaderboard_profile_is_refused_in_the_seat():
    from mua.errors import UsageError

    ctx = GymContext(options={"profile": "leaderboard"}, user_kind="seat")
    with pytest.raises(UsageError, match="user seat needs gym.options.profile: mua"):
        GYM.make_env(ctx)
