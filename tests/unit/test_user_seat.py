"""The user seat (`seat: user`): config checks, the seat env with a scripted policy in the
user's chair (observations, loss masks, the fidelity reward), a fixed LLM agent behind a fake
OpenAI server (answering, and failing into a masked trajectory), and the per-gym checks."""

from __future__ import annotations

import dataclasses
import random

import pytest
from pydantic import ValidationError

from mua.config.gyms import GymConfig
from mua.config.rollout import RolloutConfig
from mua.errors import UsageError
from mua.gym import GymContext, Task, get_gym
from mua.gym.user_seat import check_seat
from mua.models import load_tokenizer
from mua.rollout.collect import run_rollouts_sync
from mua.rollout.policies import MessagePolicy, expert_policy
from mua.users.fidelity import UserTurn, fidelity
from mua.users.seat_spec import seat_spec
from tests.fakes.fake_openai import FakeOpenAIServer, Fault


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer("tiny:qwen3-1m")


def cfg(max_turns: int = 6) -> RolloutConfig:
    return RolloutConfig(
        max_turns=max_turns,
        max_new_tokens_per_turn=16,
        max_total_tokens=1024,
        call_timeout_s=10.0,
        trajectory_timeout_s=30.0,
    )


def guess_task(target: int, max_number: int = 8) -> Task:
    spec = get_gym("guess")
    task = spec.build_tasks(None, seed=0, options={"max_number": max_number})["test"][0]
    return dataclasses.replace(task, payload={"target": target, "max_number": max_number})


def replies(*texts: str) -> MessagePolicy:
    """A user policy that says `texts` in order (then repeats the last)."""
    said = []

    async def act(messages, task):
        text = texts[min(len(said), len(texts) - 1)]
        said.append(text)
        return {"role": "assistant", "content": text}

    return MessagePolicy(act, tool_parser="bracket", name="scripted user")


def run_seat(
    tok, entry: GymConfig, tasks, policy, max_turns: int = 6, options=None, agent_turns=None
):
    spec = seat_spec(get_gym(entry.name), entry, agent_turns or max_turns)
    ctx = GymContext(options=dict(options or {}), seed=0)
    return run_rollouts_sync(
        tasks,
        policy=policy,
        gym_spec=spec,
        gym_ctx=ctx,
        tokenizer=tok,
        rollout_cfg=cfg(max_turns),
        n=1,
    )


def scripted_seat(tok, gym: str, n_tasks: int, max_turns: int, prompt_says: str):
    """(entry, tasks, trajectories) after checking that the gym's scripted user, in the seat against its
    expert, ends every episode of the first `n_tasks` training tasks fully faithful."""
    entry = GymConfig(name=gym, seat="user")
    spec = seat_spec(get_gym(gym), entry, max_turns)
    tasks = get_gym(gym).build_tasks(None, seed=0)["train"][:n_tasks]
    trajs = run_seat(tok, entry, tasks, expert_policy(spec, GymContext(seed=0)), max_turns)
    for traj in trajs:
        assert traj.termination == "done", traj.detail
        assert traj.reward == pytest.approx(1.0)
        assert prompt_says in traj.messages[0]["content"]
    return entry, tasks, trajs


# ----- config -----------------------------------------------------------------------------------
def test_seat_defaults_to_agent_and_agent_key_needs_the_user_seat():
    entry = GymConfig(name="guess")
    assert entry.seat == "agent" and entry.agent is None
    user = GymConfig(name="guess", seat="user")
    assert user.seat_agent().kind == "expert"
    llm = GymConfig(
        name="guess", seat="user", agent={"kind": "llm", "model": "m", "base_url": "http://x/v1"}
    )
    assert llm.agent.kind == "llm" and llm.agent.max_retries == 4  # the endpoint's keys
    with pytest.raises(ValidationError, match="add `seat: user`"):
        GymConfig(name="guess", agent={"kind": "expert"})


def test_check_seat_refuses_in_one_line():
    math = get_gym("math")  # a gym without a user
    with pytest.raises(UsageError, match="gym math has no user that can take the seat") as e:
        check_seat("gym", GymConfig(name="math", seat="user"), math)
    assert "\n" not in str(e.value) and "guess" in str(e.value) and "tau2" in str(e.value)
    no_expert = dataclasses.replace(get_gym("guess"), expert=None)
    with pytest.raises(UsageError, match="no scripted expert.*kind: llm"):
        check_seat("gym", GymConfig(name="guess", seat="user"), no_expert)
    check_seat(
        "gym",
        GymConfig(name="guess", seat="user", agent={"kind": "llm", "model": "m"}),
        no_expert,
    )
    with pytest.raises(UsageError, match="reward_weights does not apply with seat: user"):
        check_seat(
            "gym",
            GymConfig(name="guess", seat="user", reward_weights={"correct": 2.0}),
            get_gym("guess"),
        )
    check_seat("gym", GymConfig(name="math"), math)  # seat: agent changes nothing


def test_check_gyms_refuses_an_entry_without_a_seat():
    from mua.config.recipes import TrainRecipe
    from mua.gym.mix import check_gyms

    recipe = TrainRecipe.model_validate(
        {"model": {"path": "tiny:qwen3-1m"}, "gyms": [{"name": "math", "seat": "user"}]}
    )
    with pytest.raises(UsageError, match="gym math has no user that can take the seat"):
        check_gyms(recipe, "train")


# ----- the seat env -------------------------------------------------------------------------------
def test_guess_seat_agent_messages_are_observations_and_user_turns_are_trained(tok):
    entry = GymConfig(name="guess", seat="user")
    # target 3 of 1..8: the expert guesses 4 (lower), 2 (higher), 3 (correct)
    (traj,) = run_seat(tok, entry, [guess_task(3)], replies("lower", "higher", "correct"))
    roles = [m["role"] for m in traj.messages]
    assert roles == ["system", "user", "assistant", "user", "assistant", "user", "assistant"]
    assert "You picked the number 3" in traj.messages[0]["content"]
    assert [m["content"] for m in traj.messages if m["role"] == "user"] == [
        "[answer] 4",
        "[answer] 2",
        "[answer] 3",
    ]
    assert traj.termination == "done" and traj.reward == pytest.approx(1.0)
    assert traj.reward_components == {"fidelity": pytest.approx(1.0)}
    # tokens with loss mask 1 are exactly the policy's (the user's) sampled turns
    trained = {i for i, m in enumerate(traj.loss_mask) if m}
    assert trained and all(traj.turn_index[i] >= 0 for i in trained)
    assert all(traj.sources[i] != "prompt" for i in trained)
    decoded = tok.decode([traj.token_ids[i] for i in sorted(trained)])
    assert "higher" in decoded and "[answer]" not in decoded


def test_fidelity_is_the_share_of_clean_user_turns(tok):
    entry = GymConfig(name="guess", seat="user")
    # target 3: every "higher" is a lie (the expert guesses 4, 6, 7, 8)
    (lying,) = run_seat(tok, entry, [guess_task(3)], replies("higher"), max_turns=4)
    assert len([m for m in lying.messages if m["role"] == "assistant"]) == 4
    assert lying.reward == pytest.approx(0.0)
    # target 7: 4 -> higher (true), 6 -> lower (a lie), 5 -> higher (true), then the expert,
    # left with an empty range, guesses 6 -> higher (true), 7 -> higher (a lie; the env still
    # ends the game, since 7 is right): 3 clean turns of 5
    (two_lies,) = run_seat(tok, entry, [guess_task(7)], replies("higher", "lower", "higher"))
    assert [m["content"] for m in two_lies.messages if m["role"] == "user"] == [
        "[answer] 4",
        "[answer] 6",
        "[answer] 5",
        "[answer] 6",
        "[answer] 7",
    ]
    assert two_lies.termination == "done"
    assert two_lies.reward == pytest.approx(3 / 5)
    assert two_lies.reward_components == {"fidelity": pytest.approx(3 / 5)}


def test_the_runner_budget_scores_the_turns_so_far(tok):
    entry = GymConfig(name="guess", seat="user")
    policy = replies("lower", "lower")
    (traj,) = run_seat(tok, entry, [guess_task(3)], policy, max_turns=2, agent_turns=6)
    assert traj.termination == "max_turns"  # the runner's budget, before the agent's
    assert traj.reward == pytest.approx(1 / 2)  # lower (true of 4), lower (false of 2)


def test_fidelity_counts_leaks_and_inconsistent_replies():
    seat = get_gym("guess").user_seat
    task = guess_task(5)
    turns = [UserTurn("[answer] 4", "higher, it is 5"), UserTurn("[answer] 6", "lower")]
    value, counts = fidelity(turns, task, "guess", seat, success=False)
    assert value == pytest.approx(1 / 2) and counts == {"leak": 1}
    value, counts = fidelity([UserTurn("[answer] 4", "maybe")], task, "guess", seat, False)
    assert value == 0.0 and counts == {"inconsistent": 1}
    assert fidelity([], task, "guess", seat, False) == (1.0, {})


def test_telepathy_checks_decidable_answers_only():
    seat = get_gym("telepathy").user_seat
    task = next(
        t
        for t in get_gym("telepathy").build_tasks(None)["train"]
        if t.payload["name"] == "Albert Einstein"
    )
    assert seat.check("[action] Is it a person?", "Yes.", task) is None
    assert "hidden answer is 'Yes'" in seat.check("[action] Is it a person?", "No", task)
    assert "hidden answer is 'No'" in seat.check("[action] Is it an animal?", "yes", task)
    assert seat.check("[action] Does it have a secret name?", "No", task) is None  # undecided
    assert "not Yes, No or Maybe" in seat.check("Is it a person?", "perhaps", task)
    assert seat.as_json("yes!") == {"answer": "Yes"}


def test_telepathy_seat_episode_scripted_user_is_faithful(tok):
    entry, tasks, trajs = scripted_seat(tok, "telepathy", 3, 8, "You host twenty questions")
    for traj in trajs:
        assert traj.messages[1]["content"].startswith("[action] Is it")
    # a user who says No to everything contradicts the entity's attributes
    (liar,) = run_seat(tok, entry, tasks[:1], replies("No"), max_turns=8)
    assert liar.reward < 1.0


def test_scripted_user_noise_is_seeded_and_checked():
    from mua.users.seat_spec import scripted_user

    seat = get_gym("guess").user_seat
    make = scripted_user(seat)
    task = guess_task(5)
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "[answer] 4"}]

    import asyncio

    clean = asyncio.run(make(GymContext(seed=0))(messages, task))
    assert clean["content"] == "higher"
    noisy = [
        asyncio.run(make(GymContext(options={"user_noise": 1.0}, seed=s))(messages, task))
        for s in range(12)
    ]
    assert {m["content"] for m in noisy} == {"higher", "lower", "correct"}
    again = asyncio.run(make(GymContext(options={"user_noise": 1.0}, seed=3))(messages, task))
    assert again == noisy[3]
    with pytest.raises(UsageError, match="user_noise must be a number from 0 to 1"):
        make(GymContext(options={"user_noise": 2}))


# ----- the fixed LLM agent ------------------------------------------------------------------------
def _llm_entry(base_url: str, **extra) -> GymConfig:
    agent = {"kind": "llm", "model": "fake-model", "base_url": base_url, **extra}
    return GymConfig(name="guess", seat="user", agent=agent)


def test_llm_agent_plays_the_agent(tok, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    guesses = iter(["[answer] 2", "[answer] 3"])
    with FakeOpenAIServer(lambda request: next(guesses)) as srv:
        entry = _llm_entry(srv.base_url)
        (traj,) = run_seat(tok, entry, [guess_task(3)], replies("higher", "correct"))
        seen = srv.requests[-1]["json"]["messages"]
    assert traj.termination == "done" and traj.reward == pytest.approx(1.0)
    assert [m["content"] for m in traj.messages if m["role"] == "user"] == [
        "[answer] 2",
        "[answer] 3",
    ]
    assert seen[-1] == {"role": "user", "content": "higher"}  # the agent saw the user's reply


def test_a_failing_llm_agent_masks_the_trajectory(tok, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    with FakeOpenAIServer(faults=lambda i, body: Fault("http500")) as srv:
        entry = _llm_entry(srv.base_url, max_retries=1, backoff_s=0.01)
        (traj,) = run_seat(tok, entry, [guess_task(3)], replies("higher"))
    assert traj.termination == "user_failure"
    assert "fixed agent could not answer" in traj.detail
    assert not any(traj.loss_mask)  # nothing of the policy's was sampled or trained


# ----- guess's LLM user mode ----------------------------------------------------------------------
def test_guess_llm_user_answers_through_ctx_llm():
    import asyncio

    from mua.gym import AgentAction, ToolCall

    asked = []

    class FakeUser:
        async def complete(self, messages):
            asked.append(messages)
            return "Higher!"

    async def play(options):
        ctx = GymContext(user_kind="llm", llm=FakeUser(), options=options)
        env = get_gym("guess").make_env(ctx)
        await env.reset(guess_task(6))
        call = ToolCall("interact_with_env", {"choice": "answer", "content": "4"})
        return await env.step(AgentAction(text="", tool_calls=[call]))

    scripted = asyncio.run(play({}))  # the default, also under user.kind: llm
    assert scripted.messages == [{"role": "user", "content": "higher"}] and not asked
    step = asyncio.run(play({"llm_user": True}))
    assert step.messages == [{"role": "user", "content": "Higher!"}]
    assert not step.done and "number 6" in asked[0][0]["content"]
    assert asked[0][1]["content"] == "[answer] 4"
    with pytest.raises(UsageError, match="llm_user must be true or false"):
        get_gym("guess").build_tasks(None, options={"llm_user": "yes"})


def test_random_agent_guesses_are_still_checked():
    seat = get_gym("guess").user_seat
    rng = random.Random(0)
    task = guess_task(5)
    for _ in range(20):
        guess = rng.randint(1, 8)
        truth = "correct" if guess == 5 else ("higher" if guess < 5 else "lower")
        assert seat.check(f"[answer] {guess}", truth, task) is None
        assert seat.scripted_reply(f"[answer] {guess}", task) == truth


def test_seated_runs_get_the_seat_spec_and_others_stay():
    from mua.config.recipes import TrainRecipe
    from mua.gym.mix import gym_runs
    from mua.users.seat_env import SeatEnv
    from mua.users.seat_spec import seated

    recipe = TrainRecipe.model_validate(
        {
            "model": {"path": "tiny:qwen3-1m"},
            "gyms": [{"name": "guess", "seat": "user", "label": "user"}, {"name": "guess"}],
        }
    )
    user, agent = (seated(run) for run in gym_runs(recipe, with_clients=False))
    assert user.spec.reward_components == {"fidelity": 1.0}
    assert isinstance(user.spec.make_env(user.ctx), SeatEnv)
    assert seated(user) is user  # seating twice changes nothing
    assert agent.spec is get_gym("guess")


def test_preflight_checks_the_fixed_agent_endpoint(monkeypatch):
    from mua.config.recipes import TrainRecipe
    from mua.errors import RunFailure
    from mua.run.preflight import ask_endpoints
    from mua.run.spec import run_spec

    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    refuse = Fault("status", status=401, message="bad key")
    with FakeOpenAIServer(faults=lambda i, body: refuse) as srv:
        agent = {"kind": "llm", "model": "fake-model", "base_url": srv.base_url}
        recipe = TrainRecipe.model_validate(
            {
                "model": {"path": "tiny:qwen3-1m"},
                "gym": {"name": "guess", "seat": "user", "agent": agent},
            }
        )
        with pytest.raises(RunFailure, match="fixed agent"):
            ask_endpoints(run_spec(recipe, e) for e in recipe.gyms)
        assert srv.total_requests >= 1


def test_intention_seat_scripted_requester_and_its_checks(tok):
    _, tasks, _ = scripted_seat(tok, "intention", 2, 8, "What you want")
    seat = get_gym("intention").user_seat
    task = tasks[0]  # the hotel: Lisbon, the first week of June, 100 to 200 dollars, ...
    asked = "[action] Which city are you travelling to?"
    assert seat.check(asked, "Lisbon, please.", task) is None
    assert "does not say 'Lisbon'" in seat.check(asked, "Somewhere warm.", task)
    assert "'Tokyo'" in seat.check(asked, "Lisbon or maybe Tokyo.", task)
    # volunteering the budget before the agent asked about it is a leak
    turns = [UserTurn(asked, "Lisbon, and 100 to 200 dollars a night.")]
    assert fidelity(turns, task, "intention", seat, success=False) == (0.0, {"leak": 1})


def test_turtle_seat_scripted_host_and_its_checks(tok):
    entry, tasks, _ = scripted_seat(tok, "turtle", 2, 6, "The hidden truth")
    (liar,) = run_seat(tok, entry, tasks[:1], replies("No"), max_turns=6)
    assert liar.reward == pytest.approx(0.0)  # both key points denied
    seat = get_gym("turtle").user_seat
    statement = tasks[0].payload["criteria"][0]["statement"].rstrip(".").lower()
    assert seat.check(f"[action] Is it true that {statement}?", "Yes!", tasks[0]) is None
    assert seat.check("[action] Was it raining?", "No", tasks[0]) is None  # not decided
    assert "not Yes, No or Maybe" in seat.check("[action] Was it raining?", "Who knows", tasks[0])


def test_persuade_seat_follows_the_points_raised_so_far(tok):
    entry, tasks, trajs = scripted_seat(tok, "persuade", 2, 6, "You firmly believe this claim")
    # the expert raises one counter-point a turn; the scripted persuadee concedes two levels each
    assert "My stance: Partly Agree." in trajs[0].messages[2]["content"]
    seat = get_gym("persuade").user_seat
    task = tasks[0]
    point = task.payload["points"][0]
    raised = f"[answer] Consider this: {point['point']}"
    assert seat.finding([raised], ["Fair. My stance: Partly Agree."], task) is None
    # conceding to nothing, not conceding to a point, or no stance at all: inconsistent
    assert "'Strongly Agree'" in seat.finding([raised], ["No. My stance: Strongly Agree"], task)
    assert "'Partly Agree'" in seat.finding(
        ["[answer] You are wrong."], ["Ok. My stance: Partly Agree"], task
    )
    assert "does not end with" in seat.finding([raised], ["I agree with you now."], task)
    # a user that never moves is inconsistent once a point has been raised
    (stubborn,) = run_seat(
        tok, entry, tasks[:1], replies("No. My stance: Strongly Agree."), max_turns=6
    )
    assert stubborn.termination in ("done", "max_turns") and stubborn.reward == pytest.approx(0.0)
